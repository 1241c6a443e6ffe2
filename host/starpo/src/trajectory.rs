//! Finished trajectories: what the rollout records, what reward functions score, what
//! `trajectories.jsonl` stores (mirrors WIT `trajectory` / `turn` plus RAGEN's status fields).

use ragen_gym_core::Metric;
use serde::{Deserialize, Serialize};

/// One turn of a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// The state shown at the start of the turn.
    pub observation: String,
    /// `max_actions_per_traj` minus the actions executed before this turn.
    pub actions_left: usize,
    /// The cleaned response (stored in the history and trained on), or the raw text when it did
    /// not parse.
    pub response: String,
    /// Text inside `<think>`, if the response parsed.
    pub think: Option<String>,
    /// Text inside `<answer>`, if the response parsed.
    pub answer: Option<String>,
    /// Actions executed this turn, in order (canonical names).
    pub actions: Vec<String>,
    /// Sum of the env rewards of this turn's actions.
    pub env_reward: f64,
    /// The answer parsed and every action named a valid action.
    pub action_is_valid: bool,
    /// At least one executed action changed the state.
    pub action_is_effective: bool,
    /// This turn drew the format penalty.
    pub format_penalty: bool,
    /// Env diagnostics of the turn's last step.
    pub info: Vec<Metric>,
}

/// One finished trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Env id, `namespace/Name-vN`.
    pub env_id: String,
    /// Metric tag.
    pub tag: String,
    /// Env group (same seed within a group).
    pub group: usize,
    /// The seed the env was reset with.
    pub seed: u64,
    /// The turns, in order.
    pub turns: Vec<Turn>,
    /// The state after the last executed action.
    pub final_observation: String,
    /// Actions executed in total.
    pub num_actions: usize,
    /// The episode ended (by the env, or by the action budget).
    pub terminated: bool,
    /// Ended without success (env done without success, budget exhausted, or an error).
    pub truncated: bool,
    /// `terminated && !truncated` (spec §2): the env finished with success.
    pub success: bool,
    /// Accumulated format penalty (negative or 0).
    pub penalty: f64,
    /// Reward added by reward-function plugins.
    pub extra_reward: f64,
    /// Why the trajectory ended early, if it did (plugin trap, env error, prompt too long).
    pub end_reason: Option<String>,
}

impl Trajectory {
    /// Sum of the env rewards over turns.
    pub fn env_reward(&self) -> f64 {
        self.turns.iter().map(|t| t.env_reward).sum()
    }

    /// The trajectory score used for training: env rewards + format penalty + reward functions
    /// (spec §2, §4.4).
    pub fn score(&self) -> f64 {
        self.env_reward() + self.penalty + self.extra_reward
    }
}

/// A reward-function plugin's verdict (WIT `reward-breakdown`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardBreakdown {
    /// Added to the trajectory's env rewards.
    pub total: f64,
    /// Named parts of `total`.
    pub components: Vec<Metric>,
}

/// A reward function scoring finished trajectories (the sandbox's reward-function plugins
/// implement this). An `Err` is recorded and scores 0.
pub trait RewardFunction: Send {
    /// Name used in metrics (`reward/{name}`).
    fn name(&self) -> &str;
    /// Score one trajectory.
    fn score(&mut self, trajectory: &Trajectory) -> Result<RewardBreakdown, String>;
}
