//! `ragen-gym webshop ...`: the WebShop-compatible test server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ragen_gym_webshop::{Catalog, SessionLimits, WebShopServer};

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
    /// Close a session after this many seconds without a request (clients that die, such as
    /// plugin instances discarded after a trap, never close theirs).
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Most open sessions; creating one more closes the least recently used.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,
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
    let limits = SessionLimits {
        idle_timeout: Duration::from_secs(args.idle_timeout),
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
    };
    let addr = format!("{}:{}", args.host, args.port);
    let server = WebShopServer::start_with(catalog, &addr, limits)
        .context("failed to start the webshop server")?;
    eprintln!(
        "webshop: serving {products} products and {goals} goals on {} (AgentGym routes: /create /reset /step /available_actions /observation); Ctrl-C stops",
        server.base_url()
    );
    server.wait();
    Ok(())
}
