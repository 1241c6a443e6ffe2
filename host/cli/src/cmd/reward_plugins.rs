//! `train --reward-plugin FILE`: sandboxed reward-function plugins (WIT world `reward-plugin`)
//! whose `score(trajectory)` is added to the env rewards of every trajectory (issue: StarPO
//! trainer, item 4). Adapts the sandbox's [`ragen_gym_sandbox::RewardFunction`] to the trainer's
//! [`ragen_gym_starpo::RewardFunction`] trait.

use super::plugin_args::{SandboxArgs, load};
use crate::ExpectedError;
use ragen_gym_core::Metric;
use ragen_gym_starpo::{RewardBreakdown, RewardFunction, Trajectory};

/// One loaded reward-function plugin, named by its manifest id in metrics (`reward/{id}/mean`).
pub struct SandboxedReward {
    name: String,
    inner: ragen_gym_sandbox::RewardFunction,
}

impl RewardFunction for SandboxedReward {
    fn name(&self) -> &str {
        &self.name
    }

    /// A trap or bad output becomes `Err` (recorded by the trainer, no reward); the sandbox
    /// re-instantiates the plugin on the next call.
    fn score(&mut self, t: &Trajectory) -> Result<RewardBreakdown, String> {
        let wit = ragen_gym_sandbox::Trajectory {
            env_id: t.env_id.clone(),
            seed: t.seed,
            success: t.success,
            turns: t
                .turns
                .iter()
                .map(|u| {
                    let mut info = u.info.clone();
                    info.push(Metric::new(
                        "action_is_valid",
                        f64::from(u8::from(u.action_is_valid)),
                    ));
                    info.push(Metric::new(
                        "action_is_effective",
                        f64::from(u8::from(u.action_is_effective)),
                    ));
                    ragen_gym_sandbox::Turn {
                        observation: u.observation.clone(),
                        response: u.response.clone(),
                        think: u.think.clone(),
                        answer: u.answer.clone(),
                        actions: u.actions.clone(),
                        env_reward: u.env_reward,
                        info,
                    }
                })
                .collect(),
        };
        match self.inner.score(&wit) {
            Ok(Ok(b)) => Ok(RewardBreakdown {
                total: b.total,
                components: b.components,
            }),
            Ok(Err(refusal)) => Err(refusal),
            Err(trap) => Err(trap.to_string()),
        }
    }
}

/// Load every `--reward-plugin` (a `.wasm` path or built-in name) under the same sandbox flags as
/// the env.
///
/// # Errors
/// A plugin that fails verification, or is an env plugin rather than a reward-function plugin.
pub fn load_all(
    specs: &[String],
    args: &SandboxArgs,
) -> anyhow::Result<Vec<Box<dyn RewardFunction>>> {
    specs
        .iter()
        .map(|spec| {
            let plugin = load(spec, args)?;
            let name = plugin.info().manifest.id.clone();
            let inner = plugin
                .reward_function()
                .map_err(|e| ExpectedError::plugin(spec, e))?;
            Ok(Box::new(SandboxedReward { name, inner }) as Box<dyn RewardFunction>)
        })
        .collect()
}
