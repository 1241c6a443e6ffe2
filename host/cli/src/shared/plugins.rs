//! How the CLI resolves a plugin: `PLUGIN` is a built-in name, a path, a pinned URL or an
//! `oci://` reference, fetched and verified through `ragen-gym-registry` under the source flags
//! (`--allow-unpinned`, `--insecure-registry`, `--locked`); then inspected, loaded into a
//! sandbox, and recorded in the run's lock file (`ragen-gym.lock`).

use crate::ExpectedError;

use ragen_gym_core::RewardFunction;
use ragen_gym_registry::{Digest, LockFile, LockedPlugin, PluginRef, PluginRole, RegistryError};
use ragen_gym_sandbox::{Plugin, PluginInfo, Sandbox, WasmRewardFunction};
use std::path::{Path, PathBuf};

use super::sandbox::SandboxArgs;
use super::source::SourceArgs;

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

/// `spec` as messages may name it: a plugin reference in its display form, which carries no
/// credentials (`ragen_gym_registry::reference`); anything else as given.
pub fn shown(spec: &str) -> String {
    spec.parse::<PluginRef>()
        .map_or_else(|_| spec.to_string(), |r| r.to_string())
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

/// Fetch the env plugin `spec` and verify it as the sandbox will, without running it or
/// compiling it (`inspect`, and `publish` before anything leaves the machine).
///
/// # Errors
/// [`ExpectedError::PluginRefused`] (exit code 11) for a plugin that cannot be fetched or fails
/// verification.
pub fn fetch_and_inspect(
    spec: &str,
    src: &SourceArgs,
) -> anyhow::Result<(PluginSource, PluginInfo)> {
    let source = fetch_plugin(spec, PluginRole::Env, src)
        .map_err(|e| ExpectedError::plugin(&shown(spec), e))?;
    let info = ragen_gym_sandbox::inspect_bytes(&source.name, &source.bytes)
        .map_err(|e| ExpectedError::plugin(&source.name, e))?;
    Ok((source, info))
}

/// Load a plugin into a sandbox of its own (the commands that run one plugin).
///
/// # Errors
/// As [`SandboxArgs::sandbox`] and [`load_into`].
pub fn load(spec: &str, args: &SandboxArgs) -> anyhow::Result<Plugin> {
    load_into(&args.sandbox(0)?, spec, PluginRole::Env, &args.source).map(|(p, _)| p)
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
    let source =
        fetch_plugin(spec, role, src).map_err(|e| ExpectedError::plugin(&shown(spec), e))?;
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
            WasmRewardFunction::new(&plugin).map_err(|e| ExpectedError::plugin(&shown(spec), e))?;
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
