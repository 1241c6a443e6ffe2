//! `ragen-gym play`.

use std::process::ExitCode;

/// Arguments of `ragen-gym play`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym play` is not built yet")
}
