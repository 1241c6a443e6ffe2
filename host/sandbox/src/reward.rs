//! [`WasmRewardFunction`]: a reward-function plugin (world `reward-plugin`) behind
//! `ragen_gym_core::RewardFunction`. `score(trajectory)` runs under the same limits as env
//! calls, in one instance per function, re-instantiated after a trap.

use crate::call::Call;
use crate::grants::Grants;
use crate::lifted::{ScoreFunc, score_func};
use crate::output;
use crate::plugin::{Exports, Plugin};
use crate::state::HostState;
use ragen_gym_core::{
    PluginFailure, PluginFailureKind, RewardBreakdown, RewardError, RewardFunction, Trajectory,
};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use wasmtime::Store;

/// A loaded reward-function plugin with its own instance, named by its manifest id in metrics
/// (`reward/{id}/mean`).
pub struct WasmRewardFunction {
    plugin: Plugin,
    live: Option<(Store<HostState>, ScoreFunc)>,
}

impl WasmRewardFunction {
    /// A reward function from a `reward-function` plugin. Its instance is made at the first
    /// `score`.
    ///
    /// # Errors
    /// [`PluginFailureKind::Instantiate`] if the plugin is an env plugin.
    pub fn new(plugin: &Plugin) -> Result<Self, PluginFailure> {
        if !matches!(plugin.exports(), Exports::Reward(_)) {
            return Err(plugin.failure(
                PluginFailureKind::Instantiate,
                "is not a reward-function plugin",
            ));
        }
        Ok(Self {
            plugin: plugin.clone(),
            live: None,
        })
    }

    fn instantiate(&self) -> Result<(Store<HostState>, ScoreFunc), PluginFailure> {
        let Exports::Reward(indices) = self.plugin.exports() else {
            unreachable!("checked in WasmRewardFunction::new")
        };
        let mut store = self
            .plugin
            .new_store(&Grants::default(), Arc::new(AtomicU64::new(0)));
        self.plugin.arm(&mut store, Call::Instantiate);
        let guest = self
            .plugin
            .pre()
            .instantiate(&mut store)
            .and_then(|instance| {
                indices.load(&mut store, &instance)?;
                score_func(&mut store, &instance)
            })
            .map_err(|e| PluginFailure {
                kind: PluginFailureKind::Instantiate,
                ..self.plugin.classify(&e, &store)
            })?;
        Ok((store, guest))
    }
}

impl RewardFunction for WasmRewardFunction {
    fn name(&self) -> &str {
        &self.plugin.info().manifest.id
    }

    /// A refusal by the plugin is [`RewardError::Refused`]; a trap or bad output is
    /// [`RewardError::Plugin`] and discards the instance (the next call makes a fresh one).
    fn score(&mut self, trajectory: &Trajectory) -> Result<RewardBreakdown, RewardError> {
        let wit = (&ragen_gym_sdk::Trajectory::from(trajectory)).into();
        if self.live.is_none() {
            self.live = Some(self.instantiate()?);
        }
        let Some((store, score)) = self.live.as_mut() else {
            unreachable!("instantiated above")
        };
        store.data_mut().reseed(trajectory.seed);
        self.plugin.arm(store, Call::Score);
        let reply = match score.call(&mut *store, (wit,)) {
            Ok((reply,)) => reply,
            Err(e) => {
                let failure = self.plugin.classify(&e, store);
                self.live = None;
                return Err(failure.into());
            }
        };
        let max = self.plugin.config().max_output_bytes;
        let breakdown: RewardBreakdown = reply
            .map_err(|message| RewardError::Refused {
                message: message.text.chars().take(max).collect(),
            })?
            .into();
        if let Err(m) = output::check_breakdown(&breakdown) {
            self.live = None;
            return Err(self.plugin.failure(PluginFailureKind::BadOutput, m).into());
        }
        Ok(breakdown)
    }
}
