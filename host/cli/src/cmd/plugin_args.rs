//! Shared by the plugin subcommands: resolve `PLUGIN` (a built-in name, a path, a pinned URL or
//! an `oci://` reference, through `ragen-gym-registry`), the source flags (`--allow-unpinned`,
//! `--insecure-registry`, `--locked`) and the sandbox flags (`--allow-host`, `--fuel`,
//! `--memory-mib`).

use crate::ExpectedError;
use anyhow::Context;
use ragen_gym_core::RewardFunction;
use ragen_gym_registry::{
    Digest, LockFile, LockedPlugin, PluginCache, PluginRef, PluginRole, RegistryError,
    ResolveOptions, Resolver,
};
use ragen_gym_sandbox::{
    Grants, HostPort, Plugin, ReqwestTransport, Sandbox, SandboxConfig, WasmRewardFunction,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The trainer's env factory: a fresh sandboxed instance of `plugin` per call, configured with
/// `config` (the run's `env.config`) and `grants`.
pub fn env_factory(plugin: Plugin, config: String, grants: Grants) -> ragen_gym_starpo::EnvFactory {
    Box::new(
        move || -> Result<Box<dyn ragen_gym_core::Env>, ragen_gym_core::EnvCallError> {
            Ok(Box::new(ragen_gym_sandbox::WasmEnv::new(
                &plugin,
                &config,
                grants.clone(),
            )?))
        },
    )
}

/// Where plugins may come from, and what pins them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Accept an `http(s)://` plugin URL without a `#sha256=<hex>` pin.
    #[arg(long)]
    pub allow_unpinned: bool,
    /// Allow plain HTTP to HOST:PORT for plugin downloads: `http://` URLs and OCI registries
    /// (repeatable).
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,
    /// Refuse any plugin whose digest differs from the one in LOCKFILE (`ragen-gym.lock` of an
    /// earlier run), or that it does not list.
    #[arg(long, value_name = "LOCKFILE")]
    pub locked: Option<PathBuf>,
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
                ..ResolveOptions::default()
            },
        ))
    }
}

/// A plugin's bytes and identity, before it is loaded.
#[derive(Debug, Clone)]
pub struct PluginSource {
    /// A display name (`built-in sokoban`, the path, the URL, the `oci://` reference).
    pub name: String,
    /// The reference as recorded in lock files and trajectories.
    pub reference: String,
    /// The component.
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`.
    pub digest: Digest,
    /// For an OCI reference, the manifest digest it resolved to.
    pub oci_manifest: Option<Digest>,
}

impl PluginSource {
    /// The lock entry of this plugin, loaded as `plugin`, used as `role`.
    pub fn lock_entry(&self, role: PluginRole, plugin: &Plugin) -> LockedPlugin {
        let m = &plugin.info().manifest;
        LockedPlugin {
            role,
            reference: self.reference.clone(),
            digest: self.digest,
            oci_manifest: self.oci_manifest,
            id: m.id.clone(),
            version: m.version.clone(),
            interface_version: m.interface_version.clone(),
        }
    }
}

/// Sandbox limits and capability grants.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SandboxArgs {
    /// Grant the plugin HTTP access to HOST:PORT (repeatable). Used only if the plugin's manifest
    /// declares the same target.
    #[arg(long = "allow-host", value_name = "HOST:PORT")]
    pub allow_host: Vec<String>,
    /// Grant the real wall and monotonic clocks (used only if the plugin's manifest declares
    /// `capabilities.clock`; otherwise the plugin runs on the virtual clock).
    #[arg(long = "allow-clock")]
    pub allow_clock: bool,
    /// Grant real randomness (used only if the manifest declares `capabilities.random`;
    /// otherwise WASI randomness is derived from the reset seed).
    #[arg(long = "allow-random")]
    pub allow_random: bool,
    /// Fuel units per plugin call (default 2e9; about 100 M units per 10 ms of guest work), or
    /// `off` to run without fuel (only the wall-clock deadline then stops a runaway call).
    /// A budget of 0 is refused.
    #[arg(long, value_name = "UNITS|off", value_parser = parse_fuel)]
    pub fuel: Option<Fuel>,
    /// Linear-memory cap per plugin instance, MiB (default 256).
    #[arg(long = "memory-mib", value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Most live plugin instances (one per env); set by `train`/`eval --model` from the config's
    /// env counts so RAGEN-scale runs (128 train + 256 val envs) fit the pooling allocator.
    #[arg(skip)]
    pub max_instances: Option<u32>,
    /// Where plugins may come from.
    #[command(flatten)]
    pub source: SourceArgs,
}

/// `--fuel`: a per-call budget of at least one unit, or no fuel metering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fuel {
    /// This many units per call.
    Units(u64),
    /// Run without fuel.
    Off,
}

fn parse_fuel(s: &str) -> Result<Fuel, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Fuel::Off);
    }
    match s.parse::<u64>() {
        Ok(0) => {
            Err("0 is a budget no call can run in; use `--fuel off` to run without fuel".into())
        }
        Ok(n) => Ok(Fuel::Units(n)),
        Err(e) => Err(format!("expected a number of fuel units or `off`: {e}")),
    }
}

impl SandboxArgs {
    /// The sandbox configuration these flags select.
    pub fn config(&self) -> SandboxConfig {
        let mut cfg = SandboxConfig::default();
        match self.fuel {
            Some(Fuel::Units(f)) => cfg.fuel_per_call = f,
            Some(Fuel::Off) => cfg.fuel = false,
            None => {}
        }
        if let Some(m) = self.memory_mib {
            cfg.memory_bytes = m << 20;
        }
        if let Some(n) = self.max_instances {
            cfg.max_instances = cfg.max_instances.max(n);
        }
        cfg
    }

    /// The one sandbox of a run, with these limits. When the user granted any host
    /// (`--allow-host`), it gets the reqwest HTTP transport; without grants no transport exists
    /// at all, so even a gate bug could not open a connection.
    ///
    /// # Errors
    /// The engine or the HTTP client cannot be set up.
    pub fn sandbox(&self) -> anyhow::Result<Sandbox> {
        let mut builder = Sandbox::builder().config(self.config());
        if !self.allow_host.is_empty() {
            let transport =
                ReqwestTransport::with_defaults().context("failed to set up the HTTP transport")?;
            builder = builder.http_transport(Arc::new(transport));
        }
        builder.build().context("failed to set up the sandbox")
    }

    /// The user's grants.
    pub fn grants(&self) -> anyhow::Result<Grants> {
        let http = self
            .allow_host
            .iter()
            .map(|s| HostPort::parse(s).map_err(|e| anyhow::anyhow!("--allow-host: {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Grants {
            http,
            clock: self.allow_clock,
            random: self.allow_random,
        })
    }
}

/// Resolve `spec` used as `role`: a built-in name or alias (`bandit`, `sokoban`, `frozenlake`,
/// ...), or a [`PluginRef`] (path, pinned URL, `oci://` reference) fetched, verified and cached
/// by the registry client. With `--locked`, the lock file must list the plugin with the same
/// digest.
///
/// # Errors
/// An unknown, unreachable or unverifiable plugin, or one the lock file refuses.
pub fn fetch_plugin(
    spec: &str,
    role: PluginRole,
    src: &SourceArgs,
) -> anyhow::Result<PluginSource> {
    let lock = src
        .locked
        .as_ref()
        .map(|p| LockFile::read(p).map(|l| (l, p.clone())))
        .transpose()?;
    let locked = |reference: &str| -> anyhow::Result<Option<(Digest, PathBuf)>> {
        Ok(match &lock {
            Some((l, p)) => Some((l.require(role, reference, p)?.digest, p.clone())),
            None => None,
        })
    };
    if let Some(builtin) = ragen_gym_builtins::find(spec) {
        let digest = Digest::of(builtin.wasm);
        let reference = builtin.name.to_string();
        if let Some((l, p)) = locked(&reference)?
            && l != digest
        {
            return Err(RegistryError::LockMismatch {
                reference,
                locked: l,
                found: digest,
                lock: p,
            }
            .into());
        }
        return Ok(PluginSource {
            name: format!("built-in {}", builtin.name),
            reference,
            bytes: builtin.wasm.to_vec(),
            digest,
            oci_manifest: None,
        });
    }
    let r: PluginRef = spec.parse()?;
    if let PluginRef::Path(p) = &r
        && !p.exists()
    {
        let names: Vec<&str> = ragen_gym_builtins::names().collect();
        anyhow::bail!(
            "plugin `{spec}` is neither a file, a URL, an oci:// reference nor a built-in (built-ins: {})",
            names.join(", ")
        );
    }
    let reference = r.to_string();
    let pin = locked(&reference)?;
    let resolved = src
        .resolver()?
        .resolve(&r, pin.as_ref().map(|(d, p)| (d, p.as_path())))?;
    Ok(PluginSource {
        name: reference.clone(),
        reference,
        bytes: resolved.bytes,
        digest: resolved.digest,
        oci_manifest: resolved.oci_manifest,
    })
}

/// Read a built-in or a local plugin file: a display name and the bytes (for benchmarks).
///
/// # Errors
/// As [`fetch_plugin`].
pub fn read_plugin(spec: &str) -> anyhow::Result<(String, Vec<u8>)> {
    let s = fetch_plugin(spec, PluginRole::Env, &SourceArgs::default())?;
    Ok((s.name, s.bytes))
}

/// Load a plugin into a sandbox of its own (the commands that run one plugin).
///
/// # Errors
/// As [`SandboxArgs::sandbox`] and [`load_into`].
pub fn load(spec: &str, args: &SandboxArgs) -> anyhow::Result<Plugin> {
    load_into(&args.sandbox()?, spec, PluginRole::Env, &args.source).map(|(p, _)| p)
}

/// Load a plugin (a built-in name or any plugin reference), used as `role`, into `sandbox`, with
/// its lock entry.
///
/// # Errors
/// An unknown, unreachable or unverifiable plugin, or one the sandbox refuses, is an
/// [`ExpectedError::PluginRefused`] (exit code 11).
pub fn load_into(
    sandbox: &Sandbox,
    spec: &str,
    role: PluginRole,
    src: &SourceArgs,
) -> anyhow::Result<(Plugin, LockedPlugin)> {
    let source = fetch_plugin(spec, role, src).map_err(|e| ExpectedError::plugin(spec, e))?;
    let plugin = sandbox
        .load_bytes(&source.name, &source.bytes)
        .map_err(|e| ExpectedError::plugin(&source.name, e))?;
    let entry = source.lock_entry(role, &plugin);
    Ok((plugin, entry))
}

/// The reward functions of a run, in `--reward-plugin` order.
pub type RewardFunctions = Vec<Box<dyn RewardFunction>>;

/// Load every `--reward-plugin` (a built-in name or any plugin reference) into the run's sandbox
/// (`train --reward-plugin FILE`: sandboxed reward functions whose `score(trajectory)` is added
/// to the env rewards of every trajectory), with their lock entries.
///
/// # Errors
/// [`ExpectedError::PluginRefused`] (exit code 11) for a plugin that fails verification, or is
/// an env plugin rather than a reward-function plugin.
pub fn load_reward_functions(
    sandbox: &Sandbox,
    specs: &[String],
    src: &SourceArgs,
) -> anyhow::Result<(RewardFunctions, Vec<LockedPlugin>)> {
    let mut functions = Vec::new();
    let mut entries = Vec::new();
    for spec in specs {
        let (plugin, entry) = load_into(sandbox, spec, PluginRole::Reward, src)?;
        let function =
            WasmRewardFunction::new(&plugin).map_err(|e| ExpectedError::plugin(spec, e))?;
        functions.push(Box::new(function) as Box<dyn RewardFunction>);
        entries.push(entry);
    }
    Ok((functions, entries))
}

/// Write `ragen-gym.lock` into `dir` with `entries`.
///
/// # Errors
/// The lock file could not be written.
pub fn write_lock(dir: &Path, entries: Vec<LockedPlugin>) -> anyhow::Result<PathBuf> {
    let mut lock = LockFile::default();
    for e in entries {
        lock.upsert(e);
    }
    let path = dir.join(ragen_gym_registry::LOCK_FILE_NAME);
    lock.write(&path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuel_is_a_positive_budget_or_off() {
        assert_eq!(parse_fuel("1"), Ok(Fuel::Units(1)));
        assert_eq!(parse_fuel("off"), Ok(Fuel::Off));
        assert!(parse_fuel("0").unwrap_err().contains("--fuel off"));
        assert!(parse_fuel("-1").is_err());
        let args = |fuel| SandboxArgs {
            fuel: Some(fuel),
            ..SandboxArgs::default()
        };
        let on = args(Fuel::Units(7)).config();
        assert!(on.fuel && on.fuel_per_call == 7);
        assert!(!args(Fuel::Off).config().fuel);
    }

    #[test]
    fn clock_and_random_are_granted_only_when_asked() {
        let none = SandboxArgs::default().grants().unwrap();
        assert!(!none.clock && !none.random);
        let both = SandboxArgs {
            allow_clock: true,
            allow_random: true,
            ..SandboxArgs::default()
        }
        .grants()
        .unwrap();
        assert!(both.clock && both.random);
    }
}
