//! Where plugins may come from and what pins them: the source flags (`--allow-unpinned`,
//! `--insecure-registry`, `--locked`, and the download bounds of [`NetArgs`]) and the
//! `ragen-gym-registry` resolver they select.

use anyhow::Context;
use ragen_gym_registry::{PluginCache, ResolveOptions, Resolver};
use std::path::PathBuf;

use super::net::NetArgs;

/// Where plugins may come from, and what pins them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Accept an `http(s)://` plugin URL without a `#sha256=<hex>` pin.
    #[arg(long)]
    pub allow_unpinned: bool,
    /// Allow plain HTTP to HOST:PORT for plugin downloads: `http://` URLs, OCI registries and
    /// redirect hops; an OCI layer's foreign URLs must be on such a host too (repeatable).
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,
    /// Refuse any plugin whose digest differs from the one in LOCKFILE (`ragen-gym.lock` of an
    /// earlier run), or that it does not list.
    #[arg(long, value_name = "LOCKFILE")]
    pub locked: Option<PathBuf>,
    /// Bounds on downloads (and on API calls).
    #[command(flatten)]
    pub net: NetArgs,
}

impl SourceArgs {
    /// The resolver these flags select, over the default plugin cache
    /// (`~/.cache/ragen-gym/plugins`, or under `$RAGEN_GYM_CACHE`).
    pub fn resolver(&self) -> anyhow::Result<Resolver> {
        let dir = PluginCache::default_dir()
            .context("no plugin cache directory: set HOME or RAGEN_GYM_CACHE")?;
        Ok(Resolver::new(
            PluginCache::new(dir),
            ResolveOptions {
                allow_unpinned: self.allow_unpinned,
                insecure_hosts: self.insecure_registry.clone(),
                limits: self.net.download_limits(),
            },
        ))
    }
}
