//! `ragen-gym plot`.

use std::process::ExitCode;

/// Arguments of `ragen-gym plot`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym plot` is not built yet")
}
