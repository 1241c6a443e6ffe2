//! `ragen-gym train`.

use std::process::ExitCode;

/// Arguments of `ragen-gym train`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym train` is not built yet")
}
