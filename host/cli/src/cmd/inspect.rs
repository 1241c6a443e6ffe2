//! `ragen-gym inspect`.

use std::process::ExitCode;

/// Arguments of `ragen-gym inspect`.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ragen-gym inspect` is not built yet")
}
