//! Shared by the plugin subcommands: resolve `PLUGIN` (a `.wasm` path or a built-in name), and
//! sandbox flags (`--allow-host`, `--fuel`, `--memory-mib`).

use crate::ExpectedError;
use anyhow::Context;
use ragen_gym_core::RewardFunction;
use ragen_gym_sandbox::{
    Grants, HostPort, Plugin, ReqwestTransport, Sandbox, SandboxConfig, WasmRewardFunction,
};
use std::path::Path;
use std::sync::Arc;

/// Sandbox limits and capability grants.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SandboxArgs {
    /// Grant the plugin HTTP access to HOST:PORT (repeatable). Used only if the plugin's manifest
    /// declares the same target.
    #[arg(long = "allow-host", value_name = "HOST:PORT")]
    pub allow_host: Vec<String>,
    /// Fuel units per plugin call (default 2e9; about 100 M units per 10 ms of guest work).
    #[arg(long, value_name = "UNITS")]
    pub fuel: Option<u64>,
    /// Linear-memory cap per plugin instance, MiB (default 256).
    #[arg(long = "memory-mib", value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Most live plugin instances (one per env); set by `train`/`eval --model` from the config's
    /// env counts so RAGEN-scale runs (128 train + 256 val envs) fit the pooling allocator.
    #[arg(skip)]
    pub max_instances: Option<u32>,
}

impl SandboxArgs {
    /// The sandbox configuration these flags select.
    pub fn config(&self) -> SandboxConfig {
        let mut cfg = SandboxConfig::default();
        if let Some(f) = self.fuel {
            cfg.fuel_per_call = f;
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
            ..Grants::default()
        })
    }
}

/// Read a plugin: a built-in name or alias from the registry (`bandit`, `sokoban`, `frozenlake`,
/// ...), or a path to a `.wasm` file. Returns a display name and the bytes.
pub fn read_plugin(spec: &str) -> anyhow::Result<(String, Vec<u8>)> {
    if let Some(builtin) = ragen_gym_builtins::find(spec) {
        return Ok((format!("built-in {}", builtin.name), builtin.wasm.to_vec()));
    }
    let path = Path::new(spec);
    if path.exists() {
        let bytes = std::fs::read(path)
            .with_context(|| format!("failed to read plugin file {}", path.display()))?;
        return Ok((path.display().to_string(), bytes));
    }
    let names: Vec<&str> = ragen_gym_builtins::names().collect();
    anyhow::bail!(
        "plugin `{spec}` is neither a file nor a built-in (built-ins: {})",
        names.join(", ")
    )
}

/// Load a plugin into a sandbox of its own (the commands that run one plugin).
///
/// # Errors
/// As [`SandboxArgs::sandbox`] and [`load_into`].
pub fn load(spec: &str, args: &SandboxArgs) -> anyhow::Result<Plugin> {
    load_into(&args.sandbox()?, spec)
}

/// Load a plugin (a `.wasm` path or a built-in name) into `sandbox`.
///
/// # Errors
/// An unknown or unreadable plugin, or one the sandbox refuses, is an
/// [`ExpectedError::PluginRefused`] (exit code 11).
pub fn load_into(sandbox: &Sandbox, spec: &str) -> anyhow::Result<Plugin> {
    let (name, bytes) = read_plugin(spec).map_err(|e| ExpectedError::plugin(spec, e))?;
    sandbox
        .load_bytes(&name, &bytes)
        .map_err(|e| ExpectedError::plugin(&name, e).into())
}

/// Load every `--reward-plugin` (a `.wasm` path or built-in name) into the run's sandbox
/// (`train --reward-plugin FILE`: sandboxed reward functions whose `score(trajectory)` is added
/// to the env rewards of every trajectory).
///
/// # Errors
/// [`ExpectedError::PluginRefused`] (exit code 11) for a plugin that fails verification, or is
/// an env plugin rather than a reward-function plugin.
pub fn load_reward_functions(
    sandbox: &Sandbox,
    specs: &[String],
) -> anyhow::Result<Vec<Box<dyn RewardFunction>>> {
    specs
        .iter()
        .map(|spec| {
            let plugin = load_into(sandbox, spec)?;
            let function =
                WasmRewardFunction::new(&plugin).map_err(|e| ExpectedError::plugin(spec, e))?;
            Ok(Box::new(function) as Box<dyn RewardFunction>)
        })
        .collect()
}
