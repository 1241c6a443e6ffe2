//! [`Sandbox`]: one wasmtime engine (fuel, epochs, pooling allocator), its linkers, the epoch
//! ticker thread and the compiled-code cache. Load plugins with [`Sandbox::load_file`] or
//! [`Sandbox::load_bytes`].

use crate::bindings::{env as envb, reward as rewb};
use crate::cache::CompileCache;
use crate::config::SandboxConfig;
use crate::error::LoadError;
use crate::http::HttpTransport;
use crate::inspect::inspect_bytes;
use crate::plugin::{Plugin, PluginInner, Pre};
use crate::state::HostState;
use ragen_gym_core::PluginKind;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Epoch tick length: the granularity of call deadlines.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// A wasmtime engine configured for untrusted plugins. Cheap to clone; plugins and envs keep it
/// alive.
#[derive(Clone)]
pub struct Sandbox {
    pub(crate) inner: Arc<SandboxInner>,
}

pub(crate) struct SandboxInner {
    pub(crate) engine: Engine,
    pub(crate) config: SandboxConfig,
    env_linker: Linker<HostState>,
    reward_linker: Linker<HostState>,
    cache: CompileCache,
    pub(crate) transport: RwLock<Option<Arc<dyn HttpTransport>>>,
    stop_ticker: Arc<AtomicBool>,
}

impl Drop for SandboxInner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl Sandbox {
    /// Build the engine, linkers and epoch ticker.
    ///
    /// # Errors
    /// [`LoadError::Engine`] when wasmtime rejects the configuration (e.g. the pooling allocator
    /// cannot reserve its address space).
    pub fn new(config: SandboxConfig) -> Result<Self, LoadError> {
        let engine_err = |e: wasmtime::Error| LoadError::Engine {
            reason: format!("{e:#}"),
        };
        let mut pool = PoolingAllocationConfig::new();
        let n = config.max_instances.max(1);
        pool.total_component_instances(n)
            .total_core_instances(n * 16)
            .total_memories(n * 2)
            .total_tables(n * 8)
            .total_stacks(n)
            .max_memory_size(
                usize::try_from(config.memory_bytes)
                    .unwrap_or(usize::MAX)
                    .max(1 << 20),
            )
            .max_core_instances_per_component(64)
            .max_memories_per_component(4)
            .max_tables_per_component(32)
            .max_core_instance_size(4 << 20)
            .max_component_instance_size(1 << 20);
        let mut wc = Config::new();
        wc.wasm_component_model(true)
            .consume_fuel(config.fuel)
            .epoch_interruption(true)
            .concurrency_support(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wc).map_err(engine_err)?;

        let mut env_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut env_linker).map_err(engine_err)?;
        envb::EnvPlugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut env_linker, |s| s)
            .map_err(engine_err)?;
        let mut reward_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut reward_linker).map_err(engine_err)?;
        rewb::RewardPlugin::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut reward_linker,
            |s| s,
        )
        .map_err(engine_err)?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop_ticker.clone();
            std::thread::Builder::new()
                .name("ragen-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| LoadError::Engine {
                    reason: format!("failed to start the epoch ticker: {e}"),
                })?;
        }
        let cache = CompileCache::new(&engine, config.cache_dir.clone());
        Ok(Self {
            inner: Arc::new(SandboxInner {
                engine,
                config,
                env_linker,
                reward_linker,
                cache,
                transport: RwLock::new(None),
                stop_ticker,
            }),
        })
    }

    /// The configuration this sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Plug in the transport that performs HTTP requests that pass the capability gate. Envs
    /// created afterwards use it.
    pub fn set_http_transport(&self, transport: Arc<dyn HttpTransport>) {
        *self
            .inner
            .transport
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(transport);
    }

    /// Load a plugin from a `.wasm` component file.
    ///
    /// # Errors
    /// See [`Sandbox::load_bytes`]; plus [`LoadError::Io`].
    pub fn load_file(&self, path: &Path) -> Result<Plugin, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes(&path.display().to_string(), &bytes)
    }

    /// Load a plugin from component bytes (`name` is used in errors): verify it without running
    /// it, compile it (or take it from the cache) and link it. Runs no plugin code.
    ///
    /// # Errors
    /// Any [`LoadError`] from verification, or [`LoadError::Compile`].
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Plugin, LoadError> {
        let info = inspect_bytes(name, bytes)?;
        let compile_err = |reason: String| LoadError::Compile {
            id: info.manifest.id.clone(),
            version: info.manifest.version.clone(),
            reason,
        };
        let component = self
            .inner
            .cache
            .get_or_compile(&self.inner.engine, &info.sha256, bytes)
            .map_err(|e| compile_err(format!("{e:#}")))?;
        let pre = match info.manifest.kind {
            PluginKind::Environment => {
                let ip = self
                    .inner
                    .env_linker
                    .instantiate_pre(&component)
                    .map_err(|e| compile_err(format!("{e:#}")))?;
                Pre::Env(envb::EnvPluginPre::new(ip).map_err(|e| compile_err(format!("{e:#}")))?)
            }
            PluginKind::RewardFunction => {
                let ip = self
                    .inner
                    .reward_linker
                    .instantiate_pre(&component)
                    .map_err(|e| compile_err(format!("{e:#}")))?;
                Pre::Reward(
                    rewb::RewardPluginPre::new(ip).map_err(|e| compile_err(format!("{e:#}")))?,
                )
            }
        };
        Ok(Plugin {
            inner: Arc::new(PluginInner {
                sandbox: self.clone(),
                info,
                pre,
                specs: Default::default(),
            }),
        })
    }
}
