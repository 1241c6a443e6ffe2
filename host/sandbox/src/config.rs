//! Sandbox-wide settings and the user's grants for one plugin.

use crate::http::HostPort;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of a [`crate::Sandbox`] (one wasmtime engine).
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Meter guest execution with fuel (deterministic budget per call). Off only for benchmarks.
    pub fuel: bool,
    /// Fuel units per call (reset, step, spec, score). About 100 M units ≈ 10 ms of a tight
    /// loop on the reference machine (`shared/spec/wasm.md` §5). A plugin's manifest may ask
    /// for less, never more.
    pub fuel_per_call: u64,
    /// Wall-clock deadline per call, enforced by epoch interruption (safety net behind fuel).
    pub call_deadline: Duration,
    /// Linear memory cap per instance, bytes.
    pub memory_bytes: u64,
    /// Cap on each string coming out of a plugin (observation, spec text), bytes.
    pub max_output_bytes: usize,
    /// Cap on captured guest stdout and stderr, bytes each per instance; writing beyond it traps.
    pub max_stdio_bytes: usize,
    /// Where compiled code is cached on disk (`<dir>/<sha256>-<engine hash>.cwasm`); `None`
    /// keeps the cache in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Most live instances (pooling allocator slots).
    pub max_instances: u32,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            fuel: true,
            fuel_per_call: 2_000_000_000,
            call_deadline: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            max_output_bytes: 1 << 20,
            max_stdio_bytes: 256 << 10,
            cache_dir: default_cache_dir(),
            max_instances: 256,
        }
    }
}

/// `$RAGEN_GYM_CACHE/compiled`, else `~/.cache/ragen-gym/compiled`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("RAGEN_GYM_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache/ragen-gym"),
    };
    Some(base.join("compiled"))
}

/// What the user grants one plugin. A capability is usable only when the plugin's manifest
/// declares it too.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `HOST:PORT` targets for `ragen:gym/http` (`--allow-host`).
    pub http: Vec<HostPort>,
    /// Real clocks (otherwise deterministic).
    pub clock: bool,
    /// Real randomness (otherwise derived from the reset seed).
    pub random: bool,
}
