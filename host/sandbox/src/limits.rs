//! Every cap the sandbox enforces, in one place: the per-sandbox settings ([`SandboxConfig`] and
//! its defaults), the pooling allocator's sizes, the per-store limits (with a
//! [`ResourceLimiter`] that records a memory-limit hit), fuel and deadline budgets, output and
//! log caps, and the HTTP caps and timeouts. `docs/architecture.md` ("Where each limit lives")
//! lists them with their reasons.

use std::path::PathBuf;
use std::time::Duration;
use wasmtime::{PoolingAllocationConfig, ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Settings of a [`crate::Sandbox`] (one wasmtime engine). A plugin's manifest may lower
/// `fuel_per_call` and `memory_bytes`, never raise them.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Meter guest execution with fuel (deterministic budget per call). Off only for benchmarks.
    pub fuel: bool,
    /// Fuel units per call (reset, step, spec, score). One unit is about one wasm instruction;
    /// a tight loop burns about 100 M units per 10 ms (`docs/architecture.md`, "Where each limit
    /// lives"), so the default allows about 0.2 s of guest work per call.
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
            cache_dir: crate::cache::default_cache_dir(),
            max_instances: 256,
        }
    }
}

/// Epoch tick length: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Instantiation (start code + constructor) may use this many per-call fuel budgets; a failure
/// names the whole budget (`fuel_per_call` × this).
pub const INSTANTIATE_FUEL_CALLS: u64 = 4;

/// Bytes budgeted per list entry on top of its strings when a guest result is copied to the
/// host (the host-side `String`/record headers wasmtime charges per entry).
const COPY_BYTES_PER_ENTRY: usize = 64;
/// Most bytes of header names and values in one `ragen:gym/http` request (also what the copy
/// budget allows for the request line and headers).
pub const MAX_HTTP_HEAD_BYTES: usize = 64 << 10;
/// Most headers in one `ragen:gym/http` request.
pub const MAX_HTTP_HEADERS: usize = 64;

/// Virtual ns per fuel unit: the guest's virtual clock advances this much per unit it burns
/// (about 10x slower than a tight loop runs on the development machine, 100 M units per 10 ms),
/// so a busy-wait of 1 ms of virtual time costs 1 M units.
pub const VIRTUAL_NS_PER_FUEL: u64 = 1;
/// Virtual ns per clock reading or timer check when fuel metering is off.
pub const VIRTUAL_NS_PER_READING: u64 = 1_000;

/// Longest metric name coming out of a plugin, bytes.
pub const MAX_METRIC_NAME_BYTES: usize = 64;
/// Most metrics in one `info` list or reward breakdown.
pub const MAX_METRICS: usize = 64;
/// Longest short spec field (id, version, action name, symbol), bytes.
pub const MAX_SHORT_BYTES: usize = 256;
/// Most action names or legend entries.
pub const MAX_LIST_LEN: usize = 1024;
/// A guest's URL is cut to this many characters when it is quoted in an error or a log line.
pub const MAX_URL_CHARS_IN_MESSAGES: usize = 200;

/// Most log lines a plugin may write per call; more are dropped and counted.
pub const MAX_LOG_LINES_PER_CALL: u32 = 64;
/// Longest log line kept, bytes (longer lines are cut and end in `...`).
pub const MAX_LOG_LINE_BYTES: usize = 1024;
/// Trailing bytes of captured stderr quoted in a panic's message.
pub const PANIC_MESSAGE_BYTES: usize = 2048;

/// Request and response bodies through the `ragen:gym/http` gate may be this many times
/// [`SandboxConfig::max_output_bytes`] (pages are bigger than the observations made of them).
pub const HTTP_BODY_OUTPUT_MULTIPLE: usize = 8;
/// Timeout of one request (connect + response) of the reqwest transport.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Response-body cap of the reqwest transport, bytes.
pub const HTTP_MAX_BODY_BYTES: usize = 1 << 20;
/// Most same-origin redirects the reqwest transport follows.
pub const HTTP_MAX_REDIRECTS: usize = 5;

/// Per-store caps on what one component instance may create (a Rust guest makes a handful of
/// core instances and tables; componentize-py guests need more).
const STORE_INSTANCES: usize = 64;
const STORE_TABLES: usize = 64;
const STORE_MEMORIES: usize = 8;
const STORE_TABLE_ELEMENTS: usize = 1 << 20;

impl SandboxConfig {
    /// The body cap of the `ragen:gym/http` gate, bytes.
    pub fn http_body_bytes(&self) -> usize {
        self.max_output_bytes
            .saturating_mul(HTTP_BODY_OUTPUT_MULTIPLE)
    }

    /// The most bytes one call may copy from a guest to the host (wasmtime's per-call "hostcall
    /// fuel", 128 MiB unless set; it is checked before each string or list is copied). It is
    /// the sum of the output caps of the largest record a plugin returns (an env spec: three
    /// texts of `max_output_bytes`, two short fields, [`MAX_LIST_LEN`] action names and legend
    /// entries of [`MAX_SHORT_BYTES`] each) or the largest request it sends (an HTTP body of
    /// [`SandboxConfig::http_body_bytes`]), whichever is larger. A list whose entries all point
    /// at one guest string is charged once per entry, so it runs into this budget, not into
    /// the host's memory.
    pub fn copy_budget_bytes(&self) -> usize {
        let entry = |strings: usize| COPY_BYTES_PER_ENTRY + strings * MAX_SHORT_BYTES;
        let spec = self
            .max_output_bytes
            .saturating_mul(3)
            .saturating_add(2 * MAX_SHORT_BYTES)
            .saturating_add(MAX_LIST_LEN * (entry(1) + entry(2)));
        let http = self.http_body_bytes().saturating_add(MAX_HTTP_HEAD_BYTES);
        spec.max(http)
    }

    /// Check the settings: a fuel budget of 0 would fail every call (turn fuel off with
    /// `fuel: false` instead), and a memory cap of 0 could not hold any plugin.
    ///
    /// # Errors
    /// The field and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.fuel && self.fuel_per_call == 0 {
            return Err((
                "fuel_per_call",
                "is 0, a budget no call can run in (to run without fuel, turn fuel off: `--fuel off`)"
                    .into(),
            ));
        }
        if self.memory_bytes == 0 {
            return Err(("memory_bytes", "is 0".into()));
        }
        Ok(())
    }

    /// Epoch ticks per call deadline (at least 1).
    pub(crate) fn deadline_ticks(&self) -> u64 {
        let ticks = self
            .call_deadline
            .as_millis()
            .div_ceil(EPOCH_TICK.as_millis())
            .max(1);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// Pooling allocator sizes for [`SandboxConfig::max_instances`] live instances. Per
    /// component: up to 64 core instances, 4 memories and 32 tables (componentize-py guests use
    /// more than wasmtime's defaults); per pool: that many per live instance.
    pub(crate) fn pooling(&self) -> PoolingAllocationConfig {
        let n = self.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(n)
            .total_core_instances(n * 16)
            .total_memories(n * 2)
            .total_tables(n * 8)
            .total_stacks(n)
            .max_memory_size(
                usize::try_from(self.memory_bytes)
                    .unwrap_or(usize::MAX)
                    .max(1 << 20),
            )
            .max_core_instances_per_component(64)
            .max_memories_per_component(4)
            .max_tables_per_component(32)
            .max_core_instance_size(4 << 20)
            .max_component_instance_size(1 << 20);
        pool
    }
}

/// A limit as a plugin gets it: the host's, lowered by the plugin's manifest if it asks for
/// less, never raised.
pub fn effective_limit(host: u64, manifest: Option<u64>) -> u64 {
    manifest.map_or(host, |m| m.min(host))
}

/// The store's [`ResourceLimiter`]: wasmtime's [`StoreLimits`] (memory cap, trap on a failed
/// grow, instance/table/memory counts) plus a flag that records a memory grow refused by the cap,
/// so a trap is classified as out-of-memory from the flag, not from the error text (as
/// wasmtime's own `tests/all/limits.rs` does with its `limit_exceeded` limiter).
pub(crate) struct PluginLimiter {
    limits: StoreLimits,
    memory_limit_hit: bool,
}

impl PluginLimiter {
    /// Caps for one store with a linear-memory cap of `memory_bytes`.
    pub(crate) fn new(memory_bytes: u64) -> Self {
        Self {
            limits: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(memory_bytes).unwrap_or(usize::MAX))
                .trap_on_grow_failure(true)
                .instances(STORE_INSTANCES)
                .tables(STORE_TABLES)
                .memories(STORE_MEMORIES)
                .table_elements(STORE_TABLE_ELEMENTS)
                .build(),
            memory_limit_hit: false,
        }
    }

    /// Whether a memory grow was refused since the last [`PluginLimiter::clear`].
    pub(crate) fn memory_limit_hit(&self) -> bool {
        self.memory_limit_hit
    }

    /// Forget an earlier hit (at the start of every call).
    pub(crate) fn clear(&mut self) {
        self.memory_limit_hit = false;
    }
}

impl ResourceLimiter for PluginLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum);
        if !matches!(allowed, Ok(true)) {
            self.memory_limit_hit = true;
        }
        allowed
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_limit_hit = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_ticks_round_up_to_whole_ticks() {
        let with = |ms| SandboxConfig {
            call_deadline: Duration::from_millis(ms),
            cache_dir: None,
            ..SandboxConfig::default()
        };
        assert_eq!(with(200).deadline_ticks(), 20);
        assert_eq!(with(201).deadline_ticks(), 21);
        assert_eq!(with(0).deadline_ticks(), 1);
    }

    #[test]
    fn a_manifest_only_lowers_a_limit() {
        assert_eq!(effective_limit(100, None), 100);
        assert_eq!(effective_limit(100, Some(99)), 99);
        assert_eq!(effective_limit(100, Some(100)), 100);
        assert_eq!(effective_limit(100, Some(101)), 100);
        assert_eq!(effective_limit(100, Some(u64::MAX)), 100);
    }

    #[test]
    fn copy_budget_is_the_largest_record_or_request() {
        let cfg = SandboxConfig {
            cache_dir: None,
            ..SandboxConfig::default()
        };
        // 3 MiB of spec texts + 512 + 1024 * (320 + 576) = 3,146,240 + 917,504 bytes of spec,
        // against an 8 MiB HTTP body + 64 KiB of head: the request is larger.
        assert_eq!(cfg.copy_budget_bytes(), (8 << 20) + (64 << 10));
        let small_http = SandboxConfig {
            max_output_bytes: 1 << 10,
            ..cfg
        };
        // 3 KiB + 512 + 917,504 (spec) > 8 KiB + 64 KiB (request).
        assert_eq!(small_http.copy_budget_bytes(), 3072 + 512 + 917_504);
    }

    #[test]
    fn zero_fuel_and_zero_memory_are_refused() {
        let base = SandboxConfig {
            cache_dir: None,
            ..SandboxConfig::default()
        };
        assert!(base.validate().is_ok());
        let zero = SandboxConfig {
            fuel_per_call: 0,
            ..base.clone()
        };
        assert_eq!(zero.validate().unwrap_err().0, "fuel_per_call");
        // Without fuel the budget is unused.
        assert!(
            SandboxConfig {
                fuel: false,
                ..zero
            }
            .validate()
            .is_ok()
        );
        let no_memory = SandboxConfig {
            memory_bytes: 0,
            ..base
        };
        assert_eq!(no_memory.validate().unwrap_err().0, "memory_bytes");
    }

    #[test]
    fn limiter_flags_a_grow_past_the_cap_and_only_that() {
        let mut l = PluginLimiter::new(1 << 20);
        assert!(l.memory_growing(0, 1 << 20, None).unwrap());
        assert!(!l.memory_limit_hit());
        let err = l
            .memory_growing(1 << 20, (1 << 20) + 65536, None)
            .unwrap_err();
        assert!(err.to_string().contains("growing memory"), "{err}");
        assert!(l.memory_limit_hit());
        l.clear();
        assert!(!l.memory_limit_hit());
        // A table grow past its cap is refused but is not a memory hit.
        assert!(l.table_growing(0, STORE_TABLE_ELEMENTS + 1, None).is_err());
        assert!(!l.memory_limit_hit());
    }
}
