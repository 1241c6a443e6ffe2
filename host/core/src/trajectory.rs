//! Finished trajectories: what the rollout records, what reward functions score, what
//! `trajectories.jsonl` stores. The fields follow the WIT `trajectory` / `turn` records
//! (`wit/types.wit`) plus RAGEN's per-env status (`ragen/llm_agent/es_manager.py`, `EnvStatus`).
//! [`From`] gives the WIT form handed to reward-function plugins.

use crate::failure::EpisodeFailure;
use crate::trace::TokenTrace;
use ragen_gym_sdk::{Metric, StepResult};
use serde::{Deserialize, Serialize};

/// One env step: the action sent and what the env returned, or the error that ended the
/// trajectory. What `ragen-gym replay` checks, step by step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The action (canonical name).
    pub action: String,
    /// The env's result, or the error message.
    pub outcome: Result<StepResult, String>,
    /// The actions the env's expert advised in the state this step started from (all equally
    /// good ones, `ragen:gym/expert` `advise`), when the rollout asked (`rollout.expert_agreement`
    /// and an env with an expert); absent otherwise and in records from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert: Option<Vec<String>>,
}

impl Step {
    /// Whether the expert was asked and `action` is among the actions it advised.
    pub fn agrees_with_expert(&self) -> Option<bool> {
        self.expert.as_ref().map(|a| a.contains(&self.action))
    }
}

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
    /// Every env step of the turn, in order (empty in files written before step records).
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The response's exact tokens when it was sampled under constrained decoding, else `None`
    /// (RAGEN re-tokenises the text). Kept in memory for the training batch, not written to
    /// `trajectories.jsonl`.
    #[serde(skip)]
    pub sampled: Option<TokenTrace>,
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
    /// `terminated && !truncated`, RAGEN's success metric (`es_manager.py`, `EnvStatus`): the env
    /// finished with success.
    pub success: bool,
    /// Accumulated format penalty (negative or 0).
    pub penalty: f64,
    /// Reward added by reward-function plugins.
    pub extra_reward: f64,
    /// Why the trajectory ended early, if it did (plugin trap, env error, prompt too long).
    pub end_reason: Option<String>,
    /// The class of the env-side failure that ended it, if one did (absent from
    /// `trajectories.jsonl` otherwise, and in lines written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<EpisodeFailure>,
}

impl Trajectory {
    /// Sum of the env rewards over turns.
    pub fn env_reward(&self) -> f64 {
        self.turns.iter().map(|t| t.env_reward).sum()
    }

    /// The trajectory score used for training: env rewards + format penalty + reward functions
    /// (RAGEN `ragen/llm_agent/ctx_manager.py::get_masks_and_scores` puts the sum of the turn
    /// rewards and the penalty on the last token).
    pub fn score(&self) -> f64 {
        self.env_reward() + self.penalty + self.extra_reward
    }
}

/// The WIT `turn` given to reward-function plugins. The WIT record has no validity fields, so
/// `action_is_valid` and `action_is_effective` travel as 0/1 metrics appended to `info`.
impl From<&Turn> for ragen_gym_sdk::Turn {
    fn from(t: &Turn) -> Self {
        let mut info = t.info.clone();
        info.push(Metric::new(
            "action_is_valid",
            f64::from(u8::from(t.action_is_valid)),
        ));
        info.push(Metric::new(
            "action_is_effective",
            f64::from(u8::from(t.action_is_effective)),
        ));
        Self {
            observation: t.observation.clone(),
            response: t.response.clone(),
            think: t.think.clone(),
            answer: t.answer.clone(),
            actions: t.actions.clone(),
            env_reward: t.env_reward,
            info,
        }
    }
}

/// The WIT `trajectory` given to reward-function plugins.
impl From<&Trajectory> for ragen_gym_sdk::Trajectory {
    fn from(t: &Trajectory) -> Self {
        Self {
            env_id: t.env_id.clone(),
            seed: t.seed,
            turns: t.turns.iter().map(Into::into).collect(),
            success: t.success,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(reward: f64, valid: bool) -> Turn {
        Turn {
            observation: "o".into(),
            actions_left: 3,
            response: "<answer>Up</answer>".into(),
            think: None,
            answer: Some("Up".into()),
            actions: vec!["Up".into()],
            env_reward: reward,
            action_is_valid: valid,
            action_is_effective: false,
            format_penalty: !valid,
            info: vec![Metric::new("boxes_on_target", 1.0)],
            steps: Vec::new(),
            sampled: None,
        }
    }

    fn trajectory() -> Trajectory {
        Trajectory {
            env_id: "ragen/Sokoban-v0".into(),
            tag: "SimpleSokoban".into(),
            group: 2,
            seed: 17,
            turns: vec![turn(-0.1, true), turn(10.9, false)],
            final_observation: "done".into(),
            num_actions: 2,
            terminated: true,
            truncated: false,
            success: true,
            penalty: -0.1,
            extra_reward: 0.5,
            end_reason: None,
            failure: None,
        }
    }

    #[test]
    fn score_is_env_rewards_plus_penalty_plus_reward_functions() {
        let t = trajectory();
        assert!((t.env_reward() - 10.8).abs() < 1e-12);
        assert!((t.score() - (10.8 - 0.1 + 0.5)).abs() < 1e-12);
    }

    #[test]
    fn wit_form_keeps_the_turns_and_adds_validity_metrics() {
        let t = trajectory();
        let w = ragen_gym_sdk::Trajectory::from(&t);
        assert_eq!(
            (w.env_id.as_str(), w.seed, w.success),
            ("ragen/Sokoban-v0", 17, true)
        );
        assert_eq!(w.turns.len(), 2);
        assert_eq!(w.turns[1].env_reward, 10.9);
        assert_eq!(w.turns[1].answer.as_deref(), Some("Up"));
        let info: Vec<(&str, f64)> = w.turns[1]
            .info
            .iter()
            .map(|m| (m.name.as_str(), m.value))
            .collect();
        assert_eq!(
            info,
            [
                ("boxes_on_target", 1.0),
                ("action_is_valid", 0.0),
                ("action_is_effective", 0.0)
            ]
        );
    }
}
