//! Per-instance host state: the WASI context (no capabilities), the store's limiter, captured
//! stdio, the deterministic randomness and the virtual clock (`state/clock.rs`). (The `log` and `http` host imports that
//! read it are implemented in `imports.rs`.)

mod clock;

use crate::http::HttpGate;
use crate::limits::PluginLimiter;
use clock::VirtualClock;
use std::sync::{Arc, Mutex};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Randomness seen by the guest (WASI `random` and `insecure-random`): splitmix64 over a state
/// the host reseeds at every `reset`, so the guest's randomness derives from the reset seed
/// (`docs/architecture.md`, "Sandbox rules").
#[derive(Clone)]
pub(crate) struct SeededRng(pub(crate) Arc<Mutex<u64>>);

impl rand_core::TryRng for SeededRng {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.try_next_u64()? as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ragen_gym_core::splitmix64(&mut s))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let v = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

/// Store data of one plugin instance.
pub(crate) struct HostState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: PluginLimiter,
    pub(crate) plugin_id: String,
    pub(crate) stderr: MemoryOutputPipe,
    /// Kept so the pipe lives as long as the instance (the guest's stdout is discarded).
    _stdout: MemoryOutputPipe,
    pub(crate) rng: Option<SeededRng>,
    /// The virtual clock; `None` when the real clock is declared and granted.
    pub(crate) clock: Option<VirtualClock>,
    /// Origin of the real monotonic clock (a granted clock).
    pub(crate) real_clock_origin: std::time::Instant,
    /// When the running call's deadline passes: a real timer never waits beyond it.
    pub(crate) call_ends_at: std::time::Instant,
    /// Fuel burnt since the last reset by the calls before the running one.
    pub(crate) fuel_before_call: u64,
    pub(crate) http: Option<HttpGate>,
    /// The call running now and its fuel budget (set by `Plugin::arm`).
    pub(crate) call: crate::call::Call,
    pub(crate) fuel_budget: u64,
    pub(crate) log_lines_this_call: u32,
    pub(crate) log_dropped: u64,
    pub(crate) log_clipped: u64,
}

/// What the WASI context may see.
pub(crate) struct WasiSetup {
    pub(crate) real_clock: bool,
    pub(crate) real_random: bool,
    /// Fuel metering is on (the virtual clock then follows fuel).
    pub(crate) fuel: bool,
    pub(crate) stdio_cap: usize,
}

impl HostState {
    pub(crate) fn new(
        plugin_id: &str,
        limiter: PluginLimiter,
        setup: &WasiSetup,
        http: Option<HttpGate>,
    ) -> Self {
        let stdout = MemoryOutputPipe::new(setup.stdio_cap);
        let stderr = MemoryOutputPipe::new(setup.stdio_cap);
        // No preopens, env vars, args or network: WasiCtxBuilder grants none by default.
        let mut b = WasiCtxBuilder::new();
        b.stdout(stdout.clone()).stderr(stderr.clone());
        let rng = (!setup.real_random).then(|| SeededRng(Arc::new(Mutex::new(0))));
        if let Some(rng) = &rng {
            b.secure_random(rng.clone())
                .insecure_random(rng.clone())
                .insecure_random_seed(0);
        }
        let clock = (!setup.real_clock).then(|| VirtualClock::new(setup.fuel));
        if let Some(clock) = &clock {
            b.wall_clock(clock.clone());
        }
        Self {
            wasi: b.build(),
            table: ResourceTable::new(),
            limiter,
            plugin_id: plugin_id.to_string(),
            stderr,
            _stdout: stdout,
            rng,
            clock,
            real_clock_origin: std::time::Instant::now(),
            call_ends_at: std::time::Instant::now(),
            fuel_before_call: 0,
            http,
            call: crate::call::Call::Instantiate,
            fuel_budget: 0,
            log_lines_this_call: 0,
            log_dropped: 0,
            log_clipped: 0,
        }
    }

    /// Reseed the guest's randomness and rewind its virtual clock (called at every
    /// `reset(seed)`, before the call is armed).
    pub(crate) fn reseed(&mut self, seed: u64) {
        if let Some(rng) = &self.rng {
            *rng.0.lock().unwrap_or_else(|p| p.into_inner()) = seed;
        }
        if let Some(clock) = &self.clock {
            clock.rewind();
        }
        // Fuel counts from here: the call about to be armed adds nothing for earlier calls.
        self.fuel_before_call = 0;
        self.fuel_budget = 0;
    }

    /// The last `max` bytes of captured stderr (a panic message, usually).
    pub(crate) fn stderr_tail(&self, max: usize) -> String {
        let bytes = self.stderr.contents();
        let start = bytes.len().saturating_sub(max);
        String::from_utf8_lossy(&bytes[start..]).trim().to_string()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
