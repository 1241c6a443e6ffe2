//! [`Plugin`]: a loaded, verified and compiled plugin, and what every call into it shares: store
//! creation with its limits, per-call fuel and epoch budgets, and trap classification. Envs and
//! reward functions are made from it by [`crate::WasmEnv::new`] and
//! [`crate::WasmRewardFunction::new`].

use crate::bindings::{environment_export, reward_export};
use crate::engine::Runtime;
use crate::grants::Grants;
use crate::http::{CapabilityGranter, HostPort, HttpGate};
use crate::inspect::PluginInfo;
use crate::limits::{PANIC_MESSAGE_BYTES, PluginLimiter, SandboxConfig};
use crate::state::{HostState, WasiSetup};
use ragen_gym_core::{EnvSpec, PluginFailure, PluginFailureKind};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use wasmtime::component::InstancePre;
use wasmtime::{Store, Trap};

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
}

/// Where the exports of a plugin's kind sit in its component (looked up once, at load).
pub(crate) enum Exports {
    /// `ragen:gym/environment`.
    Env(environment_export::GuestIndices),
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
        let host = self.config().fuel_per_call;
        self.inner
            .info
            .manifest
            .limits
            .fuel_per_call
            .map_or(host, |m| m.min(host))
    }

    /// Memory cap: the sandbox's, lowered by the manifest if it asks for less.
    pub fn memory_bytes(&self) -> u64 {
        let host = self.config().memory_bytes;
        self.inner
            .info
            .manifest
            .limits
            .memory_bytes
            .map_or(host, |m| m.min(host))
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
        store
    }

    /// Arm the per-call budgets: `calls` fuel budgets and one epoch deadline.
    pub(crate) fn arm(&self, store: &mut Store<HostState>, calls: u64) {
        if self.config().fuel {
            // Cannot fail: fuel is enabled on this engine.
            let _ = store.set_fuel(self.fuel_per_call().saturating_mul(calls));
        }
        store.set_epoch_deadline(self.config().deadline_ticks());
        let state = store.data_mut();
        state.log_lines_this_call = 0;
        state.limiter.clear();
    }

    /// Fuel consumed since [`Plugin::arm`] with the same `calls` (0 without fuel).
    pub(crate) fn fuel_used(&self, store: &Store<HostState>, calls: u64) -> u64 {
        if !self.config().fuel {
            return 0;
        }
        let left = store.get_fuel().unwrap_or(0);
        self.fuel_per_call()
            .saturating_mul(calls)
            .saturating_sub(left)
    }

    /// Turn a wasmtime error from a call into a [`PluginFailure`]: a trap by its variant, a
    /// refused memory grow by the limiter's flag (wasmtime reports it as a plain error).
    pub(crate) fn classify(
        &self,
        err: &wasmtime::Error,
        store: &Store<HostState>,
    ) -> PluginFailure {
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
                    "used its budget of {} fuel units for one call",
                    self.fuel_per_call()
                ),
            ),
            Some(Trap::Interrupt) => (
                PluginFailureKind::Deadline,
                format!("a call ran longer than {:?}", self.config().call_deadline),
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
            None => (
                PluginFailureKind::Trap,
                format!("{err:#}").lines().next().unwrap_or("").to_string(),
            ),
        };
        self.failure(kind, message)
    }
}
