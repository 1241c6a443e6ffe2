//! [`Runtime`]: the wasmtime engine configured for untrusted plugins (fuel, epochs, the pooling
//! allocator sized by [`crate::limits`]), the one linker (WASI with no capabilities, plus the
//! `ragen:gym` host imports), the epoch ticker thread, and the HTTP transport fixed at build
//! time. Shared by a [`crate::Sandbox`] and every plugin loaded into it.

use crate::error::LoadError;
use crate::http::HttpTransport;
use crate::limits::{EPOCH_TICK, SandboxConfig};
use crate::state::HostState;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;

/// The engine, linker and settings of one sandbox. Immutable once built.
pub(crate) struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    /// Performs HTTP requests that pass the capability gate; `None` means no request can leave.
    pub(crate) transport: Option<Arc<dyn HttpTransport>>,
    stop_ticker: Arc<AtomicBool>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Build the engine, the linker and the epoch ticker.
    pub(crate) fn new(
        config: SandboxConfig,
        transport: Option<Arc<dyn HttpTransport>>,
    ) -> Result<Self, LoadError> {
        config
            .validate()
            .map_err(|(field, reason)| LoadError::InvalidConfig { field, reason })?;
        let engine_err = |e: wasmtime::Error| LoadError::Engine {
            reason: format!("{e:#}"),
        };
        let mut wc = Config::new();
        // Component-model async is unused; turning it off halves the per-call overhead in
        // wasmtime 48 (measured on the prototype, `docs/architecture.md`).
        wc.wasm_component_model(true)
            .consume_fuel(config.fuel)
            .epoch_interruption(true)
            .concurrency_support(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(config.pooling()));
        let engine = Engine::new(&wc).map_err(engine_err)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_err)?;
        crate::imports::add_to_linker(&mut linker).map_err(engine_err)?;
        // The virtual clock's monotonic clock and timers replace wasmtime-wasi's, whose timers
        // sleep on the real clock (`state/clock.rs`).
        linker.allow_shadowing(true);
        monotonic_clock::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(engine_err)?;
        linker.allow_shadowing(false);

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
        Ok(Self {
            engine,
            linker,
            config,
            transport,
            stop_ticker,
        })
    }
}
