//! `ragen-gym eval`.

use std::process::ExitCode;

/// Arguments of `ragen-gym eval`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym eval` is not built yet")
}
