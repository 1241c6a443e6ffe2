//! [`WasmEnv`]: one environment in its own component instance (one `Store`), implementing
//! `ragen_gym_core::Env`. A trap leaves every resource of its instance unusable (wasmtime
//! answers later calls with `Trap::CannotEnterComponent`), so envs never share an instance and a
//! trap discards the instance; the next `reset` instantiates a fresh one from the `InstancePre`.

use crate::bindings::environment_export::Guest;
use crate::call::Call;
use crate::grants::Grants;
use crate::lifted::EnvFuncs;
use crate::output;
use crate::plugin::{Exports, Plugin};
use crate::state::HostState;
use ragen_gym_core::{
    Advice, Env, EnvCallError, EnvError, EnvSpec, EnvStats, ExpertInfo, PluginFailure,
    PluginFailureKind, ResetResult, StepResult,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

/// A live instance holding one `env` resource.
struct Live {
    store: Store<HostState>,
    /// The exports whose results the host reads, with the `expert` ones when the plugin has
    /// them (interface 0.1.1 and later).
    funcs: EnvFuncs,
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

impl WasmEnv {
    /// Create an env of an environment plugin from its JSON config (`""` = defaults) in a fresh
    /// instance, and read its spec (once per config and plugin; later envs reuse it).
    ///
    /// # Errors
    /// [`EnvCallError::Plugin`] if the plugin is not an environment plugin, traps, or returns
    /// a bad spec; [`EnvCallError::Env`] if it rejects the config.
    pub fn new(plugin: &Plugin, config: &str, grants: Grants) -> Result<Self, EnvCallError> {
        let http_denied = Arc::new(AtomicU64::new(0));
        let mut stats = EnvStats::default();
        let mut live = instantiate(plugin, config, &grants, &http_denied, &mut stats)?;
        let spec = match plugin.cached_spec(config) {
            Some(spec) => spec,
            None => {
                let max = plugin.config().max_output_bytes;
                let reply = run(plugin, &mut live, &mut stats, Call::Spec, |l| {
                    l.funcs.spec.call(&mut l.store, (config.to_string(),))
                })?
                .0;
                let spec = reply.map_err(|e| EnvCallError::Env {
                    env_id: plugin.info().manifest.id.clone(),
                    error: output::clip_env_error(e.into(), max),
                })?;
                let spec = spec.into();
                output::check_spec(&spec, max)
                    .map_err(|m| plugin.failure(PluginFailureKind::BadOutput, m))?;
                check_identity(plugin, &spec)?;
                plugin.cache_spec(config, &spec);
                spec
            }
        };
        Ok(Self {
            plugin: plugin.clone(),
            config: config.to_string(),
            grants,
            spec,
            live: Some(live),
            ready: false,
            stats,
            http_denied,
        })
    }

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

    /// Run one call on the live instance; on a trap discard the instance.
    fn call<R>(
        &mut self,
        call: Call,
        f: impl FnOnce(&mut Live) -> wasmtime::Result<R>,
    ) -> Result<R, PluginFailure> {
        let Some(live) = self.live.as_mut() else {
            return Err(self
                .plugin
                .failure(PluginFailureKind::Instantiate, "no live instance"));
        };
        let result = run(&self.plugin, live, &mut self.stats, call, f);
        if result.is_err() {
            self.discard();
        }
        result
    }

    fn discard(&mut self) {
        if let Some(live) = self.live.take() {
            self.stats.log_dropped += live.store.data().log_dropped;
            self.stats.log_clipped += live.store.data().log_clipped;
        }
        self.ready = false;
    }

    /// The plugin returned something the host refuses: discard the instance.
    fn bad_output(&mut self, message: String) -> EnvCallError {
        self.discard();
        self.stats.plugin_errors += 1;
        self.plugin
            .failure(PluginFailureKind::BadOutput, message)
            .into()
    }

    /// The plugin has no `expert` export: it was built against an interface before 0.1.1.
    fn no_expert_export(&self) -> EnvCallError {
        EnvCallError::NoExpert {
            plugin: self.plugin.name(),
            reason: format!(
                "it does not export ragen:gym/expert (it was built for ragen:gym interface {}; \
                 experts came with 0.1.1)",
                self.plugin.info().manifest.interface_version
            ),
        }
    }

    /// Make a fresh instance if the last one was discarded (or none was made yet).
    fn ensure_live(&mut self) -> Result<(), EnvCallError> {
        if self.live.is_none() {
            let live = instantiate(
                &self.plugin,
                &self.config,
                &self.grants,
                &self.http_denied,
                &mut self.stats,
            )?;
            self.live = Some(live);
        }
        Ok(())
    }

    fn env_error(&self, error: EnvError) -> EnvCallError {
        EnvCallError::Env {
            env_id: self.spec.id.clone(),
            error: output::clip_env_error(error, self.plugin.config().max_output_bytes),
        }
    }
}

/// Refuse a plugin whose `spec()` reports another id or version than its manifest: `inspect`
/// and the compile cache know it by the manifest, runs and metrics by the spec
/// (`docs/architecture.md` §5).
fn check_identity(plugin: &Plugin, spec: &EnvSpec) -> Result<(), PluginFailure> {
    let m = &plugin.info().manifest;
    if spec.id == m.id && spec.version == m.version {
        return Ok(());
    }
    Err(plugin.failure(
        PluginFailureKind::IdentityMismatch,
        format!(
            "spec() reports id {:?} version {:?}, the manifest declares id {:?} version {:?}",
            spec.id, spec.version, m.id, m.version
        ),
    ))
}

/// A fresh instance with its `env` resource constructed from `config`.
fn instantiate(
    plugin: &Plugin,
    config: &str,
    grants: &Grants,
    http_denied: &Arc<AtomicU64>,
    stats: &mut EnvStats,
) -> Result<Live, PluginFailure> {
    let Exports::Env(indices, expert_indices) = plugin.exports() else {
        return Err(plugin.failure(
            PluginFailureKind::Instantiate,
            "is not an environment plugin",
        ));
    };
    let mut store = plugin.new_store(grants, http_denied.clone());
    plugin.arm(&mut store, Call::Instantiate);
    stats.instances += 1;
    let guest = plugin.pre().instantiate(&mut store).and_then(|instance| {
        let funcs = EnvFuncs::load(&mut store, &instance, expert_indices.is_some())?;
        Ok((indices.load(&mut store, &instance)?, funcs))
    });
    let (guest, funcs): (Guest, EnvFuncs) = match guest {
        Ok(g) => g,
        Err(e) => {
            stats.plugin_errors += 1;
            let mut failure = plugin.classify(&e, &store);
            if failure.kind == PluginFailureKind::Trap {
                failure.kind = PluginFailureKind::Instantiate;
            }
            return Err(failure);
        }
    };
    let env = match guest.env().call_constructor(&mut store, config) {
        Ok(r) => r,
        Err(e) => {
            stats.plugin_errors += 1;
            return Err(plugin.classify(&e, &store));
        }
    };
    stats.fuel_used += plugin.fuel_used(&store);
    Ok(Live { store, funcs, env })
}

/// An instance of a plugin with an `expert` export always has it loaded; this is the error if
/// not (a host bug, reported as a trap of the call).
fn no_expert_in_instance() -> wasmtime::Error {
    wasmtime::Error::msg("the instance has no expert export")
}

/// One call under the per-call budgets, counting fuel and failures. The caller discards the
/// instance on `Err`.
fn run<R>(
    plugin: &Plugin,
    live: &mut Live,
    stats: &mut EnvStats,
    call: Call,
    f: impl FnOnce(&mut Live) -> wasmtime::Result<R>,
) -> Result<R, PluginFailure> {
    plugin.arm(&mut live.store, call);
    let result = f(live);
    stats.fuel_used += plugin.fuel_used(&live.store);
    result.map_err(|e| {
        stats.plugin_errors += 1;
        plugin.classify(&e, &live.store)
    })
}

/// Dropping an env runs the guest's destructor of its `env` resource (under the usual budgets),
/// so a plugin can release what it holds outside the sandbox, e.g. the WebShop bridge closes its
/// server session. A failing destructor is ignored: the instance goes away either way.
impl Drop for WasmEnv {
    fn drop(&mut self) {
        if let Some(mut live) = self.live.take() {
            let env = live.env;
            let _ = run(&self.plugin, &mut live, &mut self.stats, Call::Drop, |l| {
                env.resource_drop(&mut l.store)
            });
        }
    }
}

impl Env for WasmEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Start an episode. Makes a fresh instance first if the last one was discarded; reseeds
    /// the guest's randomness and rewinds its clocks from `seed`.
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.ensure_live()?;
        if let Some(live) = self.live.as_mut() {
            live.store.data_mut().reseed(seed);
        }
        let (reply,) = self.call(Call::Reset, |l| {
            l.funcs.reset.call(&mut l.store, (l.env, seed))
        })?;
        let r: ResetResult = reply.map_err(|e| self.env_error(e.into()))?.into();
        output::check_reset(&r, self.plugin.config().max_output_bytes)
            .map_err(|m| self.bad_output(m))?;
        self.ready = true;
        Ok(r)
    }

    /// Apply one action; `not-ready` if the instance was discarded since the last reset.
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        if self.live.is_none() || !self.ready {
            return Err(self.env_error(EnvError::NotReady(
                "call reset first (the instance is new or was discarded after an error)".into(),
            )));
        }
        let (reply,) = self.call(Call::Step, |l| {
            l.funcs.step.call(&mut l.store, (l.env, action.to_string()))
        })?;
        let r: StepResult = reply.map_err(|e| self.env_error(e.into()))?.into();
        output::check_step(&r, self.plugin.config().max_output_bytes)
            .map_err(|m| self.bad_output(m))?;
        Ok(r)
    }

    /// The plugin's `expert.info` for this env's config (asked once per plugin and config).
    fn expert_info(&mut self) -> Result<Option<ExpertInfo>, EnvCallError> {
        if let Some(info) = self.plugin.cached_expert(&self.config) {
            return Ok(info);
        }
        self.ensure_live()?;
        if !self.plugin.has_expert_export() {
            self.plugin.cache_expert(&self.config, &None);
            return Ok(None);
        }
        let config = self.config.clone();
        let (reply,) = self.call(Call::ExpertInfo, |l| match &l.funcs.expert {
            Some(e) => e.info.call(&mut l.store, (config,)),
            None => Err(no_expert_in_instance()),
        })?;
        let info: Option<ExpertInfo> = reply.map_err(|e| self.env_error(e.into()))?.map(Into::into);
        if let Some(i) = &info {
            output::check_expert_info(i, self.plugin.config().max_output_bytes)
                .map_err(|m| self.bad_output(m))?;
        }
        self.plugin.cache_expert(&self.config, &info);
        Ok(info)
    }

    /// The expert's advice from the current state, under the same budgets as `step`.
    fn advise(&mut self) -> Result<Advice, EnvCallError> {
        if !self.plugin.has_expert_export() {
            return Err(self.no_expert_export());
        }
        if self.expert_info()?.is_none() {
            return Err(EnvCallError::NoExpert {
                plugin: self.plugin.name(),
                reason: format!("its expert info is none for the config {:?}", self.config),
            });
        }
        if self.live.is_none() || !self.ready {
            return Err(self.env_error(EnvError::NotReady(
                "call reset first (the instance is new or was discarded after an error)".into(),
            )));
        }
        let (reply,) = self.call(Call::Advise, |l| match &l.funcs.expert {
            Some(e) => e.advise.call(&mut l.store, (l.env,)),
            None => Err(no_expert_in_instance()),
        })?;
        let a: Advice = reply.map_err(|e| self.env_error(e.into()))?.into();
        output::check_advice(&a, self.plugin.config().max_output_bytes)
            .map_err(|m| self.bad_output(m))?;
        Ok(a)
    }

    fn stats(&self) -> EnvStats {
        let mut s = self.stats.clone();
        s.http_denied = self.http_denied.load(Ordering::Relaxed);
        if let Some(live) = &self.live {
            s.log_dropped += live.store.data().log_dropped;
            s.log_clipped += live.store.data().log_clipped;
        }
        s
    }
}
