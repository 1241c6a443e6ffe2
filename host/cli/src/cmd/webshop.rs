//! `ragen-gym webshop ...`: the WebShop-compatible test server.

use std::path::PathBuf;

use anyhow::Context;
use ragen_gym_webshop::{Catalog, WebShopServer};

/// WebShop subcommands.
#[derive(clap::Subcommand)]
pub enum WebshopCommand {
    /// Serve the AgentGym WebShop routes over a shipped synthetic catalog.
    Serve(ServeArgs),
}

/// Arguments of `webshop serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Port to listen on; 0 picks a free port.
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
    /// Address to bind (loopback by default; the server has no authentication).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Catalog JSON (products + goals) to serve instead of the shipped one.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
}

/// Run a webshop subcommand.
pub fn run(cmd: WebshopCommand) -> anyhow::Result<()> {
    match cmd {
        WebshopCommand::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let catalog = match &args.catalog {
        Some(path) => Catalog::from_file(path).context("failed to load the --catalog file")?,
        None => Catalog::embedded(),
    };
    let (products, goals) = (catalog.products.len(), catalog.goals.len());
    let server = WebShopServer::start(catalog, &format!("{}:{}", args.host, args.port))
        .context("failed to start the webshop server")?;
    eprintln!(
        "webshop: serving {products} products and {goals} goals on {} (AgentGym routes: /create /reset /step /available_actions /observation); Ctrl-C stops",
        server.base_url()
    );
    server.wait();
    Ok(())
}
