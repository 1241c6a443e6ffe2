//! [`WasmRewardFunction`]: a reward-function plugin (world `reward-plugin`) behind
//! `ragen_gym_core::RewardFunction`. `score(trajectory)` runs under the same limits as env
//! calls, in one instance per function, re-instantiated after a trap.

use crate::bindings::reward::RewardPlugin;
use crate::bindings::reward::ragen::gym::types as t;
use crate::config::Grants;
use crate::plugin::{Plugin, Pre};
use crate::state::HostState;
use ragen_gym_core::{
    Metric, PluginFailure, PluginFailureKind, RewardBreakdown, RewardError, RewardFunction,
    Trajectory,
};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use wasmtime::Store;

/// A loaded reward-function plugin with its own instance, named by its manifest id in metrics
/// (`reward/{id}/mean`).
pub struct WasmRewardFunction {
    plugin: Plugin,
    live: Option<(Store<HostState>, RewardPlugin)>,
}

impl Plugin {
    /// Make a reward function from a `reward-function` plugin.
    ///
    /// # Errors
    /// [`PluginFailureKind::Instantiate`] if the plugin is an env plugin.
    pub fn reward_function(&self) -> Result<WasmRewardFunction, PluginFailure> {
        if !matches!(self.inner.pre, Pre::Reward(_)) {
            return Err(self.error(
                PluginFailureKind::Instantiate,
                "is not a reward-function plugin",
            ));
        }
        Ok(WasmRewardFunction {
            plugin: self.clone(),
            live: None,
        })
    }
}

fn metric(m: &Metric) -> t::Metric {
    t::Metric {
        name: m.name.clone(),
        value: m.value,
    }
}

impl RewardFunction for WasmRewardFunction {
    fn name(&self) -> &str {
        &self.plugin.info().manifest.id
    }

    /// A refusal by the plugin is [`RewardError::Refused`]; a trap or bad output is
    /// [`RewardError::Plugin`] and discards the instance (the next call makes a fresh one).
    fn score(&mut self, traj: &Trajectory) -> Result<RewardBreakdown, RewardError> {
        let traj = ragen_gym_sdk::Trajectory::from(traj);
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
                err.kind = PluginFailureKind::Instantiate;
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
                return Err(err.into());
            }
        };
        let max = self.plugin.sandbox().config().max_output_bytes;
        match r {
            Err(msg) => Err(RewardError::Refused {
                message: msg.chars().take(max).collect(),
            }),
            Ok(rb) => {
                let bad = |m: String| self.plugin.error(PluginFailureKind::BadOutput, m);
                if !rb.total.is_finite() {
                    self.live = None;
                    return Err(bad(format!("total is {}, not a finite number", rb.total)).into());
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
                        ))
                        .into());
                    }
                    components.push(Metric {
                        name: c.name,
                        value: c.value,
                    });
                }
                Ok(RewardBreakdown {
                    total: rb.total,
                    components,
                })
            }
        }
    }
}
