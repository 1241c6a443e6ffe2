//! `ragen-gym check`.

use std::process::ExitCode;

/// Arguments of `ragen-gym check`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym check` is not built yet")
}
