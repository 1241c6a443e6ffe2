//! [`WasmEnv`]: one environment in its own component instance (one `Store`), implementing
//! `ragen_gym_core::Env`. A trap discards the instance; the next `reset` instantiates a fresh
//! one from the `InstancePre` (`shared/spec/wasm.md` §2: a trap poisons every resource of its
//! instance, so envs never share one).

use crate::bindings::env::EnvPlugin;
use crate::config::Grants;
use crate::output;
use crate::plugin::{Plugin, Pre};
use crate::state::HostState;
use ragen_gym_core::{Env, EnvCallError, EnvError, EnvSpec, EnvStats, ResetResult, StepResult};
use ragen_gym_core::{PluginFailure, PluginFailureKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

/// Instantiation (start code + constructor) may use this many per-call fuel budgets.
const INSTANTIATE_FUEL_CALLS: u64 = 4;

struct Live {
    store: Store<HostState>,
    bindings: EnvPlugin,
    env: ResourceAny,
}

/// One sandboxed environment.
pub struct WasmEnv {
    plugin: Plugin,
    config: String,
    grants: Grants,
    spec: EnvSpec,
    live: Option<Live>,
    ready: bool,
    stats: EnvStats,
    http_denied: Arc<AtomicU64>,
}

impl Plugin {
    /// Create an env from its JSON config (`""` = defaults) in a fresh instance, and read its
    /// spec.
    ///
    /// # Errors
    /// [`EnvCallError::Plugin`] if the plugin is not an environment plugin, traps, or returns
    /// a bad spec; [`EnvCallError::Env`] if it rejects the config.
    pub fn new_env(&self, config: &str, grants: Grants) -> Result<WasmEnv, EnvCallError> {
        if !matches!(self.inner.pre, Pre::Env(_)) {
            return Err(self
                .error(
                    PluginFailureKind::Instantiate,
                    "is not an environment plugin",
                )
                .into());
        }
        let http_denied = Arc::new(AtomicU64::new(0));
        let mut env = WasmEnv {
            plugin: self.clone(),
            config: config.to_string(),
            grants,
            spec: EnvSpec {
                id: self.info().manifest.id.clone(),
                version: self.info().manifest.version.clone(),
                description: String::new(),
                instruction: String::new(),
                action_names: None,
                symbol_legend: None,
                max_episode_steps: 0,
                reward_threshold: None,
                default_config: String::new(),
            },
            live: None,
            ready: false,
            stats: EnvStats::default(),
            http_denied,
        };
        env.instantiate()?;
        let cached = self
            .inner
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(config)
            .cloned();
        if let Some(spec) = cached {
            env.spec = spec;
            return Ok(env);
        }
        let cfg = env.config.clone();
        let max = self.inner.sandbox.config().max_output_bytes;
        let spec = env.call(|live| {
            live.bindings
                .ragen_gym_environment()
                .call_spec(&mut live.store, &cfg)
        })?;
        match spec {
            Ok(s) => env.spec = output::spec(s, max).map_err(|m| env.bad_output(m))?,
            Err(e) => {
                return Err(EnvCallError::Env {
                    env_id: env.spec.id.clone(),
                    error: output::env_error(e, max),
                });
            }
        }
        self.inner
            .specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(config.to_string(), env.spec.clone());
        Ok(env)
    }
}

impl WasmEnv {
    /// The plugin this env runs.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Captured guest stderr of the current instance (up to `max` trailing bytes).
    pub fn stderr_tail(&self, max: usize) -> String {
        self.live
            .as_ref()
            .map(|l| l.store.data().stderr_tail(max))
            .unwrap_or_default()
    }

    fn instantiate(&mut self) -> Result<(), PluginFailure> {
        let Pre::Env(pre) = &self.plugin.inner.pre else {
            return Err(self.plugin.error(
                PluginFailureKind::Instantiate,
                "is not an environment plugin",
            ));
        };
        let mut store = self
            .plugin
            .new_store(&self.grants, self.http_denied.clone());
        self.plugin.arm(&mut store, INSTANTIATE_FUEL_CALLS);
        self.stats.instances += 1;
        let bindings = match pre.instantiate(&mut store) {
            Ok(b) => b,
            Err(e) => {
                self.stats.plugin_errors += 1;
                let mut err = self.plugin.classify(&e, &store);
                if err.kind == PluginFailureKind::Trap {
                    err.kind = PluginFailureKind::Instantiate;
                }
                return Err(err);
            }
        };
        let env = match bindings
            .ragen_gym_environment()
            .env()
            .call_constructor(&mut store, &self.config)
        {
            Ok(r) => r,
            Err(e) => {
                self.stats.plugin_errors += 1;
                return Err(self.plugin.classify(&e, &store));
            }
        };
        self.stats.fuel_used += self.plugin.fuel_used(&store, INSTANTIATE_FUEL_CALLS);
        self.live = Some(Live {
            store,
            bindings,
            env,
        });
        Ok(())
    }

    /// Run one call under the per-call budgets; on error discard the instance.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&mut Live) -> wasmtime::Result<R>,
    ) -> Result<R, PluginFailure> {
        let Some(live) = self.live.as_mut() else {
            return Err(self
                .plugin
                .error(PluginFailureKind::Instantiate, "no live instance"));
        };
        self.plugin.arm(&mut live.store, 1);
        let result = f(live);
        self.stats.fuel_used += self.plugin.fuel_used(&live.store, 1);
        match result {
            Ok(r) => Ok(r),
            Err(e) => {
                let err = self.plugin.classify(&e, &live.store);
                self.discard();
                Err(err)
            }
        }
    }

    fn discard(&mut self) {
        if let Some(live) = self.live.take() {
            self.stats.log_dropped += live.store.data().log_dropped;
        }
        self.stats.plugin_errors += 1;
        self.ready = false;
    }

    fn bad_output(&mut self, message: String) -> PluginFailure {
        self.discard();
        self.plugin.error(PluginFailureKind::BadOutput, message)
    }

    /// Start an episode. Makes a fresh instance first if the last one was discarded; reseeds
    /// the guest's randomness and clocks from `seed`.
    fn try_reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        if self.live.is_none() {
            self.instantiate()?;
        }
        if let Some(live) = self.live.as_mut() {
            live.store.data_mut().reseed(seed);
        }
        let r = self.call(|l| {
            l.bindings
                .ragen_gym_environment()
                .env()
                .call_reset(&mut l.store, l.env, seed)
        })?;
        let max = self.plugin.sandbox().config().max_output_bytes;
        match r {
            Ok(r) => {
                let r = output::reset(r, max).map_err(|m| self.bad_output(m))?;
                self.ready = true;
                Ok(r)
            }
            Err(e) => Err(EnvCallError::Env {
                env_id: self.spec.id.clone(),
                error: output::env_error(e, max),
            }),
        }
    }

    /// Apply one action; `not-ready` if the instance was discarded since the last reset.
    fn try_step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        if self.live.is_none() || !self.ready {
            return Err(EnvCallError::Env {
                env_id: self.spec.id.clone(),
                error: EnvError::NotReady(
                    "call reset first (the instance is new or was discarded after an error)".into(),
                ),
            });
        }
        let r = self.call(|l| {
            l.bindings
                .ragen_gym_environment()
                .env()
                .call_step(&mut l.store, l.env, action)
        })?;
        let max = self.plugin.sandbox().config().max_output_bytes;
        match r {
            Ok(r) => output::step(r, max).map_err(|m| self.bad_output(m).into()),
            Err(e) => Err(EnvCallError::Env {
                env_id: self.spec.id.clone(),
                error: output::env_error(e, max),
            }),
        }
    }
}

impl Env for WasmEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.try_reset(seed)
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        self.try_step(action)
    }

    fn stats(&self) -> EnvStats {
        let mut s = self.stats.clone();
        s.http_denied = self.http_denied.load(Ordering::Relaxed);
        if let Some(live) = &self.live {
            s.log_dropped += live.store.data().log_dropped;
        }
        s
    }
}
