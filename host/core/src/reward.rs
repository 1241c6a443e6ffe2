//! [`RewardFunction`]: scores finished trajectories; the sandbox's reward-function plugins
//! implement it (`ragen_gym_sandbox::WasmRewardFunction`), and so can native code. The trainer
//! adds `total` to the trajectory's env rewards and reports `reward/{name}/mean` and
//! `reward/{name}/errors` (TRL's per-reward-function metrics, `trl/trainer/grpo_trainer.py`).

use crate::failure::PluginFailure;
use crate::trajectory::Trajectory;
use ragen_gym_sdk::RewardBreakdown;

/// Why a reward function gave no score for a trajectory. The trainer records it against the
/// trajectory, which then gets no extra reward.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RewardError {
    /// The function declined to score this trajectory (the WIT `score` returned `err`).
    #[error("refused to score the trajectory: {message}")]
    Refused {
        /// The function's own reason.
        message: String,
    },
    /// The plugin trapped or returned bad output; its instance was discarded.
    #[error(transparent)]
    Plugin(#[from] PluginFailure),
}

/// A reward function scoring finished trajectories.
pub trait RewardFunction: Send {
    /// Name used in metrics (`reward/{name}`).
    fn name(&self) -> &str;
    /// Score one trajectory.
    ///
    /// # Errors
    /// [`RewardError`] when there is no score for this trajectory.
    fn score(&mut self, trajectory: &Trajectory) -> Result<RewardBreakdown, RewardError>;
}
