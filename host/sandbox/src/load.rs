//! [`Sandbox`]: where plugins are loaded. Loading verifies a component without running it
//! ([`crate::inspect_bytes`]), compiles it or takes it from the compile cache, and links it
//! against the sandbox's one linker. A sandbox is built once with [`Sandbox::builder`] and is
//! immutable afterwards (Extism's `PluginBuilder::with_*` style).

use crate::bindings::{environment_export, expert_export, reward_export};
use crate::cache::CompileCache;
use crate::engine::Runtime;
use crate::error::LoadError;
use crate::http::HttpTransport;
use crate::inspect::inspect_bytes;
use crate::limits::{SandboxConfig, effective_limit};
use crate::plugin::{Exports, Plugin};
use ragen_gym_core::{MAX_PLUGIN_BYTES, PluginKind, read_plugin_file};
use std::path::Path;
use std::sync::Arc;

/// A wasmtime engine configured for untrusted plugins, its linker, epoch ticker and compile
/// cache. Cheap to clone; plugins and envs keep the engine alive.
#[derive(Clone)]
pub struct Sandbox {
    runtime: Arc<Runtime>,
    cache: Arc<CompileCache>,
}

/// Builds a [`Sandbox`]: its settings and, optionally, the transport for HTTP requests that pass
/// the capability gate (without one, no request can leave the sandbox).
#[derive(Default)]
pub struct SandboxBuilder {
    config: SandboxConfig,
    transport: Option<Arc<dyn HttpTransport>>,
}

impl SandboxBuilder {
    /// Use these settings (the default is [`SandboxConfig::default`]).
    pub fn config(mut self, config: SandboxConfig) -> Self {
        self.config = config;
        self
    }

    /// Perform requests that pass the capability gate with `transport`.
    pub fn http_transport(mut self, transport: Arc<dyn HttpTransport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Build the engine, linker, epoch ticker and compile cache.
    ///
    /// # Errors
    /// [`LoadError::Engine`] when wasmtime rejects the configuration (e.g. the pooling allocator
    /// cannot reserve its address space).
    pub fn build(self) -> Result<Sandbox, LoadError> {
        let runtime = Runtime::new(self.config, self.transport)?;
        let cache = CompileCache::new(&runtime.engine, runtime.config.cache_dir.clone());
        Ok(Sandbox {
            runtime: Arc::new(runtime),
            cache: Arc::new(cache),
        })
    }
}

impl Sandbox {
    /// A builder with the default settings and no HTTP transport.
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    /// A sandbox with `config` and no HTTP transport.
    ///
    /// # Errors
    /// As [`SandboxBuilder::build`].
    pub fn new(config: SandboxConfig) -> Result<Self, LoadError> {
        Self::builder().config(config).build()
    }

    /// The settings this sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.runtime.config
    }

    /// Load a plugin from a `.wasm` component file: a regular file of at most
    /// [`MAX_PLUGIN_BYTES`].
    ///
    /// # Errors
    /// See [`Sandbox::load_bytes`]; plus [`LoadError::File`].
    pub fn load_file(&self, path: &Path) -> Result<Plugin, LoadError> {
        let bytes = read_plugin_file(path, MAX_PLUGIN_BYTES)?;
        self.load_bytes(&path.display().to_string(), &bytes)
    }

    /// Load a plugin from component bytes (`name` is used in errors): verify it without running
    /// it, compile it (or take it from the cache) and link it. Runs no plugin code.
    ///
    /// # Errors
    /// Any [`LoadError`] from verification, or [`LoadError::Compile`].
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Plugin, LoadError> {
        let info = inspect_bytes(name, bytes)?;
        let cap = effective_limit(
            self.runtime.config.memory_bytes,
            info.manifest.limits.memory_bytes,
        );
        if info.min_memory_bytes > cap {
            return Err(LoadError::MemoryOverCap {
                id: info.manifest.id.clone(),
                version: info.manifest.version.clone(),
                min_bytes: info.min_memory_bytes,
                cap_bytes: cap,
            });
        }
        let compile_err = |e: wasmtime::Error| LoadError::Compile {
            id: info.manifest.id.clone(),
            version: info.manifest.version.clone(),
            reason: format!("{e:#}"),
        };
        let component = self
            .cache
            .get_or_compile(&self.runtime.engine, &info.sha256, bytes)
            .map_err(compile_err)?;
        let pre = self
            .runtime
            .linker
            .instantiate_pre(&component)
            .map_err(compile_err)?;
        let exports = match info.manifest.kind {
            PluginKind::Environment => {
                let env = environment_export::GuestIndices::new(&pre).map_err(compile_err)?;
                // The expert is optional (interface 0.1.1): absent in plugins built against
                // 0.1.0; present but of another shape, the plugin is refused.
                let has_expert = info
                    .exports
                    .iter()
                    .any(|e| e.split('@').next() == Some("ragen:gym/expert"));
                let expert = if has_expert {
                    Some(expert_export::GuestIndices::new(&pre).map_err(compile_err)?)
                } else {
                    None
                };
                Exports::Env(env, expert)
            }
            PluginKind::RewardFunction => {
                Exports::Reward(reward_export::GuestIndices::new(&pre).map_err(compile_err)?)
            }
        };
        Ok(Plugin::new(self.runtime.clone(), info, pre, exports))
    }
}
