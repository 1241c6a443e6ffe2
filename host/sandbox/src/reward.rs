//! Reward-function plugins (world `reward-plugin`): `score(trajectory)` under the same limits as
//! env calls, one instance per [`RewardFunction`], re-instantiated after a trap.

use crate::bindings::reward::RewardPlugin;
use crate::bindings::reward::ragen::gym::types as t;
use crate::config::Grants;
use crate::error::{PluginError, PluginErrorKind};
use crate::plugin::{Plugin, Pre};
use crate::state::HostState;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use wasmtime::Store;

pub use ragen_gym_sdk::types::{RewardBreakdown, Trajectory, Turn};

/// A loaded reward-function plugin with its own instance.
pub struct RewardFunction {
    plugin: Plugin,
    live: Option<(Store<HostState>, RewardPlugin)>,
}

impl Plugin {
    /// Make a reward function from a `reward-function` plugin.
    ///
    /// # Errors
    /// [`PluginErrorKind::Instantiate`] if the plugin is an env plugin or fails to start.
    pub fn reward_function(&self) -> Result<RewardFunction, PluginError> {
        if !matches!(self.inner.pre, Pre::Reward(_)) {
            return Err(self.error(
                PluginErrorKind::Instantiate,
                "is not a reward-function plugin",
            ));
        }
        Ok(RewardFunction {
            plugin: self.clone(),
            live: None,
        })
    }
}

fn metric(m: &ragen_gym_sdk::Metric) -> t::Metric {
    t::Metric {
        name: m.name.clone(),
        value: m.value,
    }
}

impl RewardFunction {
    /// Score one trajectory. `Ok(Err(msg))` is the plugin's own refusal (recorded against the
    /// trajectory, no reward); `Err` is a trap or bad output (the instance is discarded).
    ///
    /// # Errors
    /// [`PluginError`] on traps, non-finite totals/components, or oversize names.
    pub fn score(
        &mut self,
        traj: &Trajectory,
    ) -> Result<Result<RewardBreakdown, String>, PluginError> {
        if self.live.is_none() {
            let Pre::Reward(pre) = &self.plugin.inner.pre else {
                unreachable!("checked in reward_function")
            };
            let mut store = self
                .plugin
                .new_store(&Grants::default(), Arc::new(AtomicU64::new(0)));
            self.plugin.arm(&mut store, 4);
            let b = pre.instantiate(&mut store).map_err(|e| {
                let mut err = self.plugin.classify(&e, &store);
                err.kind = PluginErrorKind::Instantiate;
                err
            })?;
            self.live = Some((store, b));
        }
        let (store, b) = self.live.as_mut().expect("instantiated above");
        store.data_mut().reseed(traj.seed);
        self.plugin.arm(store, 1);
        let wit = t::Trajectory {
            env_id: traj.env_id.clone(),
            seed: traj.seed,
            success: traj.success,
            turns: traj
                .turns
                .iter()
                .map(|u| t::Turn {
                    observation: u.observation.clone(),
                    response: u.response.clone(),
                    think: u.think.clone(),
                    answer: u.answer.clone(),
                    actions: u.actions.clone(),
                    env_reward: u.env_reward,
                    info: u.info.iter().map(metric).collect(),
                })
                .collect(),
        };
        let result = b.ragen_gym_reward_function().call_score(&mut *store, &wit);
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                let err = self.plugin.classify(&e, store);
                self.live = None;
                return Err(err);
            }
        };
        let max = self.plugin.sandbox().config().max_output_bytes;
        match r {
            Err(msg) => Ok(Err(msg.chars().take(max).collect())),
            Ok(rb) => {
                let bad = |m: String| self.plugin.error(PluginErrorKind::BadOutput, m);
                if !rb.total.is_finite() {
                    self.live = None;
                    return Err(bad(format!("total is {}, not a finite number", rb.total)));
                }
                let mut components = Vec::with_capacity(rb.components.len());
                for c in rb
                    .components
                    .into_iter()
                    .take(crate::output::MAX_METRICS + 1)
                {
                    if c.name.len() > crate::output::MAX_METRIC_NAME_BYTES
                        || !c.value.is_finite()
                        || components.len() == crate::output::MAX_METRICS
                    {
                        self.live = None;
                        return Err(bad(format!(
                            "component `{}` is invalid (name cap, count cap or non-finite value)",
                            c.name.chars().take(64).collect::<String>()
                        )));
                    }
                    components.push(ragen_gym_sdk::Metric {
                        name: c.name,
                        value: c.value,
                    });
                }
                Ok(Ok(RewardBreakdown {
                    total: rb.total,
                    components,
                }))
            }
        }
    }
}
