//! `ragen-gym webshop ...`: the WebShop-compatible test server.

use std::process::ExitCode;

/// WebShop subcommands.
#[derive(clap::Subcommand)]
pub enum WebshopCommand {
    /// Serve the AgentGym WebShop routes over a shipped synthetic catalog.
    Serve(ServeArgs),
}

/// Arguments of `webshop serve`.
#[derive(clap::Args)]
pub struct ServeArgs {}

/// Run a webshop subcommand.
pub fn run(cmd: WebshopCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        WebshopCommand::Serve(_) => anyhow::bail!("`webshop serve` is not built yet"),
    }
}
