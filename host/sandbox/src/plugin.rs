//! [`Plugin`]: a loaded, verified and compiled plugin, and what every call into it shares: store
//! creation with its limits, per-call fuel and epoch budgets, and trap classification. Envs and
//! reward functions are made from it by [`crate::WasmEnv::new`] and
//! [`crate::WasmRewardFunction::new`].

use crate::bindings::{environment_export, expert_export, reward_export};
use crate::call::Call;
use crate::engine::Runtime;
use crate::grants::Grants;
use crate::http::{CapabilityGranter, HostPort, HttpGate};
use crate::inspect::PluginInfo;
use crate::limits::{PANIC_MESSAGE_BYTES, PluginLimiter, SandboxConfig, effective_limit};
use crate::state::{HostState, WasiSetup};
use ragen_gym_core::{EnvSpec, ExpertInfo, PluginFailure, PluginFailureKind};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use wasmtime::component::InstancePre;
use wasmtime::{CallHook, Store, Trap};

/// A plugin ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<PluginInner>,
}

struct PluginInner {
    runtime: Arc<Runtime>,
    info: PluginInfo,
    pre: InstancePre<HostState>,
    exports: Exports,
    /// Validated specs by config string: `spec(config)` is a pure function of the config, so
    /// fresh envs skip the call.
    specs: Mutex<HashMap<String, EnvSpec>>,
    /// Validated `expert.info` answers by config string, likewise.
    experts: Mutex<HashMap<String, Option<ExpertInfo>>>,
}

/// Where the exports of a plugin's kind sit in its component (looked up once, at load).
pub(crate) enum Exports {
    /// `ragen:gym/environment`, and `ragen:gym/expert` when the plugin exports it (interface
    /// 0.1.1 and later; plugins built against 0.1.0 do not).
    Env(
        environment_export::GuestIndices,
        Option<expert_export::GuestIndices>,
    ),
    /// `ragen:gym/reward-function`.
    Reward(reward_export::GuestIndices),
}

impl Plugin {
    pub(crate) fn new(
        runtime: Arc<Runtime>,
        info: PluginInfo,
        pre: InstancePre<HostState>,
        exports: Exports,
    ) -> Self {
        Self {
            inner: Arc::new(PluginInner {
                runtime,
                info,
                pre,
                exports,
                specs: Mutex::default(),
                experts: Mutex::default(),
            }),
        }
    }

    /// Manifest, sha256, imports and exports (known without running plugin code).
    pub fn info(&self) -> &PluginInfo {
        &self.inner.info
    }

    /// The settings of the sandbox this plugin was loaded into.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.runtime.config
    }

    /// Fuel per call: the sandbox's budget, lowered by the manifest if it asks for less.
    pub fn fuel_per_call(&self) -> u64 {
        effective_limit(
            self.config().fuel_per_call,
            self.inner.info.manifest.limits.fuel_per_call,
        )
    }

    /// Memory cap: the sandbox's, lowered by the manifest if it asks for less.
    pub fn memory_bytes(&self) -> u64 {
        effective_limit(
            self.config().memory_bytes,
            self.inner.info.manifest.limits.memory_bytes,
        )
    }

    pub(crate) fn exports(&self) -> &Exports {
        &self.inner.exports
    }

    pub(crate) fn pre(&self) -> &InstancePre<HostState> {
        &self.inner.pre
    }

    /// The validated spec for `config`, if an earlier env already asked for it.
    pub(crate) fn cached_spec(&self, config: &str) -> Option<EnvSpec> {
        self.inner
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(config)
            .cloned()
    }

    pub(crate) fn cache_spec(&self, config: &str, spec: &EnvSpec) {
        self.inner
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(config.to_string(), spec.clone());
    }

    /// Whether the plugin exports `ragen:gym/expert` (interface 0.1.1 and later).
    pub fn has_expert_export(&self) -> bool {
        matches!(&self.inner.exports, Exports::Env(_, Some(_)))
    }

    /// The validated `expert.info` answer for `config`, if an earlier env already asked.
    pub(crate) fn cached_expert(&self, config: &str) -> Option<Option<ExpertInfo>> {
        self.inner
            .experts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(config)
            .cloned()
    }

    pub(crate) fn cache_expert(&self, config: &str, info: &Option<ExpertInfo>) {
        self.inner
            .experts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(config.to_string(), info.clone());
    }

    /// `id version` of this plugin, as errors name it.
    pub(crate) fn name(&self) -> String {
        let m = &self.inner.info.manifest;
        format!("{} {}", m.id, m.version)
    }

    /// A failure of this plugin.
    pub(crate) fn failure(
        &self,
        kind: PluginFailureKind,
        message: impl Into<String>,
    ) -> PluginFailure {
        PluginFailure {
            kind,
            plugin_id: self.inner.info.manifest.id.clone(),
            version: self.inner.info.manifest.version.clone(),
            message: message.into(),
        }
    }

    /// A fresh store: memory cap, no WASI capability, deterministic clocks/random unless both
    /// declared and granted, the http gate, captured stdio.
    pub(crate) fn new_store(
        &self,
        grants: &Grants,
        denied_counter: Arc<AtomicU64>,
    ) -> Store<HostState> {
        let config = self.config();
        let m = &self.inner.info.manifest;
        let setup = WasiSetup {
            real_clock: m.capabilities.clock && grants.clock,
            real_random: m.capabilities.random && grants.random,
            fuel: config.fuel,
            stdio_cap: config.max_stdio_bytes,
        };
        let declared: Vec<HostPort> = m
            .capabilities
            .http
            .iter()
            .filter_map(|s| HostPort::parse(s).ok())
            .collect();
        let http = HttpGate {
            granter: CapabilityGranter::new(declared, grants.http.clone()),
            transport: self.inner.runtime.transport.clone(),
            denied: denied_counter,
            max_body_bytes: config.http_body_bytes(),
        };
        let limiter = PluginLimiter::new(self.memory_bytes());
        let state = HostState::new(&m.id, limiter, &setup, Some(http));
        let mut store = Store::new(&self.inner.runtime.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Bound what one call may copy from the guest before any size check runs.
        store.set_hostcall_fuel(config.copy_budget_bytes());
        if config.fuel && store.data().clock.is_some() {
            // Virtual time follows fuel: bring the clock up to date whenever the guest calls
            // the host (the only place it can read the clock).
            store.call_hook(|mut ctx, hook| {
                if matches!(hook, CallHook::CallingHost) {
                    let left = ctx.get_fuel().unwrap_or(0);
                    let s = ctx.data_mut();
                    if let Some(clock) = &s.clock {
                        clock.set_fuel(
                            s.fuel_before_call
                                .saturating_add(s.fuel_budget.saturating_sub(left)),
                        );
                    }
                }
                Ok(())
            });
        }
        store
    }

    /// Arm the budgets of `call`: its fuel and one epoch deadline.
    pub(crate) fn arm(&self, store: &mut Store<HostState>, call: Call) {
        let budget = self.fuel_per_call().saturating_mul(call.fuel_calls());
        let used_before = self.fuel_used(store);
        crate::lift::set_output_text_cap(self.config().max_output_bytes);
        if self.config().fuel {
            // Cannot fail: fuel is enabled on this engine.
            let _ = store.set_fuel(budget);
        }
        store.set_epoch_deadline(self.config().deadline_ticks());
        let state = store.data_mut();
        state.fuel_before_call = state.fuel_before_call.saturating_add(used_before);
        state.call_ends_at = std::time::Instant::now() + self.config().call_deadline;
        state.call = call;
        state.fuel_budget = budget;
        state.log_lines_this_call = 0;
        state.limiter.clear();
    }

    /// Fuel consumed since the last [`Plugin::arm`] (0 without fuel).
    pub(crate) fn fuel_used(&self, store: &Store<HostState>) -> u64 {
        if !self.config().fuel {
            return 0;
        }
        let left = store.get_fuel().unwrap_or(0);
        store.data().fuel_budget.saturating_sub(left)
    }

    /// Turn a wasmtime error from a call into a [`PluginFailure`]: a trap by its variant, a
    /// refused memory grow by the limiter's flag (wasmtime reports it as a plain error).
    pub(crate) fn classify(
        &self,
        err: &wasmtime::Error,
        store: &Store<HostState>,
    ) -> PluginFailure {
        let call = store.data().call;
        if store.data().limiter.memory_limit_hit() {
            return self.failure(
                PluginFailureKind::OutOfMemory,
                format!(
                    "tried to grow linear memory beyond the cap of {} MiB",
                    self.memory_bytes() >> 20
                ),
            );
        }
        let (kind, message) = match err.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => (
                PluginFailureKind::OutOfFuel,
                format!(
                    "used its budget of {} fuel units for {}",
                    store.data().fuel_budget,
                    call.name()
                ),
            ),
            Some(Trap::Interrupt) => (
                PluginFailureKind::Deadline,
                format!(
                    "{} ran longer than the deadline of {:?}",
                    call.name(),
                    self.config().call_deadline
                ),
            ),
            Some(Trap::StackOverflow) => (
                PluginFailureKind::StackOverflow,
                "wasm call stack exhausted".to_string(),
            ),
            Some(Trap::UnreachableCodeReached) => {
                let tail = store.data().stderr_tail(PANIC_MESSAGE_BYTES);
                let msg = if tail.is_empty() {
                    "aborted (unreachable executed)".to_string()
                } else {
                    tail
                };
                (PluginFailureKind::Panic, msg)
            }
            Some(Trap::MemoryOutOfBounds) => (
                PluginFailureKind::Trap,
                "out of bounds memory access (a bug, or a shadow-stack overflow)".to_string(),
            ),
            Some(trap) => (PluginFailureKind::Trap, trap.to_string()),
            None if crate::lift::over_cap(err).is_some() => (
                PluginFailureKind::BadOutput,
                format!(
                    "{}: {}",
                    call.name(),
                    crate::lift::over_cap(err).map_or_else(String::new, ToString::to_string)
                ),
            ),
            None if copy_budget_exhausted(err) => (
                PluginFailureKind::BadOutput,
                self.copy_budget_message(err, call),
            ),
            // The root cause, not wasmtime's "error while executing at wasm backtrace:" context.
            None => (PluginFailureKind::Trap, err.root_cause().to_string()),
        };
        self.failure(kind, message)
    }
}

impl Plugin {
    /// The copy budget ran out: in the arguments of a host import the guest called during
    /// `call` (the error passed through wasm frames, so it carries a wasm backtrace), or in
    /// `call`'s own result (lifted after the guest returned: no wasm frame).
    fn copy_budget_message(&self, err: &wasmtime::Error, call: Call) -> String {
        let budget = self.config().copy_budget_bytes();
        if err.downcast_ref::<wasmtime::WasmBacktrace>().is_some() {
            format!(
                "the arguments of a host import called during {} came to more than the budget \
                 of {budget} bytes copied from the guest in one call (log lines are clipped to \
                 {} bytes; http requests may have {} headers of {} bytes in all)",
                call.name(),
                crate::limits::MAX_LOG_LINE_BYTES,
                crate::limits::MAX_HTTP_HEADERS,
                crate::limits::MAX_HTTP_HEAD_BYTES,
            )
        } else {
            format!(
                "{}'s result came to more than the budget of {budget} bytes copied from the \
                 guest in one call (its caps: {})",
                call.name(),
                call.output_caps(self.config())
            )
        }
    }
}

/// Whether `err` is wasmtime's refusal to copy more than the store's hostcall budget
/// (`Store::set_hostcall_fuel`). wasmtime 48 keeps that error type private, so its message is
/// the only sign of it (`wasmtime/src/runtime/component/func/options.rs`,
/// `HostcallFuelExhausted`).
fn copy_budget_exhausted(err: &wasmtime::Error) -> bool {
    err.chain().any(|e| {
        e.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    })
}
