//! `ragen-gym generate`.

use std::process::ExitCode;

/// Arguments of `ragen-gym generate`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym generate` is not built yet")
}
