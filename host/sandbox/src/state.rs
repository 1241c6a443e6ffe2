//! Per-instance host state: WASI context (no capabilities), store limits, captured stdio,
//! deterministic clocks/randomness, and the `log` / `http` host imports.

use crate::bindings::{env as envb, reward as rewb};
use crate::http::{HttpError, HttpGate, HttpRequest};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Most log lines a plugin may write per call; more are dropped and counted.
pub(crate) const MAX_LOG_LINES_PER_CALL: u32 = 64;
/// Longest log line kept, in bytes.
pub(crate) const MAX_LOG_LINE_BYTES: usize = 1024;

/// Randomness seen by the guest: splitmix64 over a state the host reseeds at every `reset`
/// (architecture note: the guest's randomness is derived from the reset seed).
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

/// A clock that starts at a fixed instant and advances 1 µs per reading, reset with the env.
#[derive(Clone)]
pub(crate) struct StepClock(pub(crate) Arc<AtomicU64>);

/// 2000-01-01T00:00:00Z in seconds since the Unix epoch: the deterministic wall clock's origin.
const CLOCK_ORIGIN_SECS: u64 = 946_684_800;

impl wasmtime_wasi::HostWallClock for StepClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_micros(1)
    }
    fn now(&self) -> std::time::Duration {
        let ticks = self.0.fetch_add(1, Ordering::Relaxed);
        std::time::Duration::from_secs(CLOCK_ORIGIN_SECS) + std::time::Duration::from_micros(ticks)
    }
}

impl wasmtime_wasi::HostMonotonicClock for StepClock {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) * 1_000
    }
}

/// Store data of one plugin instance.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub(crate) plugin_id: String,
    pub(crate) stderr: MemoryOutputPipe,
    /// Kept so the pipe lives as long as the instance (the guest's stdout is discarded).
    _stdout: MemoryOutputPipe,
    pub(crate) rng: Option<SeededRng>,
    pub(crate) clock: Option<StepClock>,
    pub(crate) http: Option<HttpGate>,
    pub(crate) log_lines_this_call: u32,
    pub(crate) log_dropped: u64,
}

/// What the WASI context may see.
pub(crate) struct WasiSetup {
    pub(crate) real_clock: bool,
    pub(crate) real_random: bool,
    pub(crate) stdio_cap: usize,
}

impl HostState {
    pub(crate) fn new(
        plugin_id: &str,
        limits: StoreLimits,
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
        let clock = (!setup.real_clock).then(|| StepClock(Arc::new(AtomicU64::new(0))));
        if let Some(clock) = &clock {
            b.wall_clock(clock.clone()).monotonic_clock(clock.clone());
        }
        Self {
            wasi: b.build(),
            table: ResourceTable::new(),
            limits,
            plugin_id: plugin_id.to_string(),
            stderr,
            _stdout: stdout,
            rng,
            clock,
            http,
            log_lines_this_call: 0,
            log_dropped: 0,
        }
    }

    /// Reseed the guest's randomness and rewind its clocks (called at every `reset(seed)`).
    pub(crate) fn reseed(&mut self, seed: u64) {
        if let Some(rng) = &self.rng {
            *rng.0.lock().unwrap_or_else(|p| p.into_inner()) = seed;
        }
        if let Some(clock) = &self.clock {
            clock.0.store(0, Ordering::Relaxed);
        }
    }

    /// The last `max` bytes of captured stderr (a panic message, usually).
    pub(crate) fn stderr_tail(&self, max: usize) -> String {
        let bytes = self.stderr.contents();
        let start = bytes.len().saturating_sub(max);
        String::from_utf8_lossy(&bytes[start..]).trim().to_string()
    }

    fn write_log(&mut self, level: &str, message: String) {
        self.log_lines_this_call += 1;
        if self.log_lines_this_call > MAX_LOG_LINES_PER_CALL {
            self.log_dropped += 1;
            return;
        }
        let mut msg = message;
        if msg.len() > MAX_LOG_LINE_BYTES {
            let mut cut = MAX_LOG_LINE_BYTES;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push_str("...");
        }
        let plugin = self.plugin_id.as_str();
        match level {
            "debug" => tracing::debug!(target: "plugin", plugin, "{msg}"),
            "info" => tracing::info!(target: "plugin", plugin, "{msg}"),
            "warn" => tracing::warn!(target: "plugin", plugin, "{msg}"),
            _ => tracing::error!(target: "plugin", plugin, "{msg}"),
        }
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

impl envb::ragen::gym::types::Host for HostState {}
impl rewb::ragen::gym::types::Host for HostState {}

fn level_name_env(level: envb::ragen::gym::log::Level) -> &'static str {
    use envb::ragen::gym::log::Level;
    match level {
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

impl envb::ragen::gym::log::Host for HostState {
    fn log(&mut self, level: envb::ragen::gym::log::Level, message: String) {
        self.write_log(level_name_env(level), message);
    }
}

impl rewb::ragen::gym::log::Host for HostState {
    fn log(&mut self, level: rewb::ragen::gym::log::Level, message: String) {
        use rewb::ragen::gym::log::Level;
        let name = match level {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.write_log(name, message);
    }
}

impl envb::ragen::gym::http::Host for HostState {
    fn fetch(
        &mut self,
        request: envb::ragen::gym::http::Request,
    ) -> Result<envb::ragen::gym::http::Response, envb::ragen::gym::http::HttpError> {
        use envb::ragen::gym::http::{HttpError as G, Response};
        let req = HttpRequest {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body,
        };
        let result = match &self.http {
            Some(gate) => gate.fetch(req),
            None => Err(HttpError::Denied(
                "this plugin has no http capability".into(),
            )),
        };
        match result {
            Ok(r) => Ok(Response {
                status: r.status,
                headers: r.headers,
                body: r.body,
            }),
            Err(HttpError::Denied(m)) => Err(G::Denied(m)),
            Err(HttpError::InvalidRequest(m)) => Err(G::InvalidRequest(m)),
            Err(HttpError::Timeout) => Err(G::Timeout),
            Err(HttpError::TooLarge) => Err(G::TooLarge),
            Err(HttpError::Transport(m)) => Err(G::Transport(m)),
        }
    }
}
