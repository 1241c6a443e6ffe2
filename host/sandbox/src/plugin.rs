//! A loaded, verified and compiled plugin, and the machinery shared by every call into it:
//! store creation with limits, per-call fuel and epoch budgets, and trap classification.

use crate::bindings::{env as envb, reward as rewb};
use crate::config::Grants;
use crate::http::{CapabilityGranter, HostPort, HttpGate};
use crate::inspect::PluginInfo;
use crate::sandbox::{EPOCH_TICK, Sandbox};
use crate::state::{HostState, WasiSetup};
use ragen_gym_core::{PluginFailure, PluginFailureKind};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use wasmtime::{Store, StoreLimitsBuilder, Trap};

/// A plugin ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    pub(crate) inner: Arc<PluginInner>,
}

pub(crate) struct PluginInner {
    pub(crate) sandbox: Sandbox,
    pub(crate) info: PluginInfo,
    pub(crate) pre: Pre,
    /// Validated specs by config string: `spec(config)` is a pure function of the config, so
    /// fresh envs skip the call.
    pub(crate) specs: std::sync::Mutex<std::collections::HashMap<String, ragen_gym_core::EnvSpec>>,
}

pub(crate) enum Pre {
    Env(envb::EnvPluginPre<HostState>),
    Reward(rewb::RewardPluginPre<HostState>),
}

impl Plugin {
    /// Manifest, sha256, imports and exports (known without running plugin code).
    pub fn info(&self) -> &PluginInfo {
        &self.inner.info
    }

    /// The sandbox this plugin was loaded into.
    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }

    /// Fuel per call: the sandbox's budget, lowered by the manifest if it asks for less.
    pub fn fuel_per_call(&self) -> u64 {
        let host = self.inner.sandbox.config().fuel_per_call;
        self.inner
            .info
            .manifest
            .limits
            .fuel_per_call
            .map_or(host, |m| m.min(host))
    }

    /// Memory cap: the sandbox's, lowered by the manifest if it asks for less.
    pub fn memory_bytes(&self) -> u64 {
        let host = self.inner.sandbox.config().memory_bytes;
        self.inner
            .info
            .manifest
            .limits
            .memory_bytes
            .map_or(host, |m| m.min(host))
    }

    pub(crate) fn error(
        &self,
        kind: PluginFailureKind,
        message: impl Into<String>,
    ) -> PluginFailure {
        PluginFailure {
            plugin_id: self.inner.info.manifest.id.clone(),
            version: self.inner.info.manifest.version.clone(),
            kind,
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
        let sb = self.inner.sandbox.config();
        let m = &self.inner.info.manifest;
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.memory_bytes()).unwrap_or(usize::MAX))
            .trap_on_grow_failure(true)
            .instances(64)
            .tables(64)
            .memories(8)
            .table_elements(1 << 20)
            .build();
        let setup = WasiSetup {
            real_clock: m.capabilities.clock && grants.clock,
            real_random: m.capabilities.random && grants.random,
            stdio_cap: sb.max_stdio_bytes,
        };
        let declared: Vec<HostPort> = m
            .capabilities
            .http
            .iter()
            .filter_map(|s| HostPort::parse(s).ok())
            .collect();
        let http = HttpGate {
            granter: CapabilityGranter::new(declared, grants.http.clone()),
            transport: self
                .inner
                .sandbox
                .inner
                .transport
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            denied: denied_counter,
            max_body_bytes: sb.max_output_bytes * 8,
        };
        let state = HostState::new(&m.id, limits, &setup, Some(http));
        let mut store = Store::new(&self.inner.sandbox.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        store
    }

    /// Arm the per-call budgets: fuel and epoch deadline.
    pub(crate) fn arm(&self, store: &mut Store<HostState>, fuel_multiplier: u64) {
        if self.inner.sandbox.config().fuel {
            // Cannot fail: fuel is enabled on this engine.
            let _ = store.set_fuel(self.fuel_per_call().saturating_mul(fuel_multiplier));
        }
        let deadline = self.inner.sandbox.config().call_deadline;
        let ticks = deadline.as_millis().div_ceil(EPOCH_TICK.as_millis()).max(1);
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
        store.data_mut().log_lines_this_call = 0;
    }

    /// Fuel consumed since [`Plugin::arm`] (0 without fuel).
    pub(crate) fn fuel_used(&self, store: &Store<HostState>, fuel_multiplier: u64) -> u64 {
        if !self.inner.sandbox.config().fuel {
            return 0;
        }
        let left = store.get_fuel().unwrap_or(0);
        self.fuel_per_call()
            .saturating_mul(fuel_multiplier)
            .saturating_sub(left)
    }

    /// Turn a wasmtime error from a call into a [`PluginFailure`].
    pub(crate) fn classify(
        &self,
        err: &wasmtime::Error,
        store: &Store<HostState>,
    ) -> PluginFailure {
        let full = format!("{err:#}");
        let first_line = |s: &str| s.lines().next().unwrap_or("").to_string();
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
                format!(
                    "a call ran longer than {:?}",
                    self.inner.sandbox.config().call_deadline
                ),
            ),
            Some(Trap::StackOverflow) => (
                PluginFailureKind::StackOverflow,
                "wasm call stack exhausted".to_string(),
            ),
            Some(Trap::UnreachableCodeReached) => {
                let tail = store.data().stderr_tail(2048);
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
            None if full.contains("forcing trap when growing memory")
                || full.contains("memory") && full.contains("limit") =>
            {
                (
                    PluginFailureKind::OutOfMemory,
                    format!(
                        "tried to grow linear memory beyond the cap of {} MiB",
                        self.memory_bytes() >> 20
                    ),
                )
            }
            None => (PluginFailureKind::Trap, first_line(&full)),
        };
        self.error(kind, message)
    }
}
