//! One logged trajectory as the page shows it: its place in the run (line, iteration, group,
//! seed), outcome, rewards, the StarPO-S filter's verdict on its group, and each turn's board,
//! response and env steps. Built from a `trajectories.jsonl` line
//! ([`ragen_gym_starpo::run_dir::TrajectoryRecord`]); every text stays text (the page inserts it
//! with `textContent`).

use super::grid::{Observation, split_observation};
use super::response::{Part, parts};
use ragen_gym_core::{Divergence, Turn};
use ragen_gym_starpo::run_dir::TrajectoryRecord;
use serde::Serialize;
use std::collections::BTreeSet;

/// How the page reads observations and responses: the legend's symbols, the env's action names
/// (`None`: free-text actions) and the action separator.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// One-character legend symbols (empty: no boards).
    pub symbols: BTreeSet<char>,
    /// The env's action names.
    pub action_names: Option<Vec<String>>,
    /// `agent_proxy.action_sep`.
    pub action_sep: String,
}

/// One env step of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    /// The action (canonical name).
    pub action: String,
    /// The env's reward (absent when the step failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// The action changed the state.
    pub effective: bool,
    /// The env's error, when the step failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The actions the env's expert advised before the step, when the rollout asked
    /// (`rollout.expert_agreement`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert: Option<Vec<String>>,
}

/// One turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnView {
    /// The state shown at the start of the turn.
    pub obs: Observation,
    /// The response in pieces, actions marked.
    pub parts: Vec<Part>,
    /// Sum of the env rewards of the turn.
    pub reward: f64,
    /// The answer parsed and every action was valid.
    pub valid: bool,
    /// The turn drew the format penalty.
    pub penalised: bool,
    /// Actions left before the turn.
    pub actions_left: usize,
    /// Its env steps.
    pub steps: Vec<StepView>,
}

/// Where a replay of the trajectory first differed from the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayView {
    /// Whether the replay matched the record.
    pub identical: bool,
    /// Turn (0-based) of the first difference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<usize>,
    /// Step within the turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// The field that differed (`observation`, `reward`, ...), or what stopped the replay.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// The recorded value.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub recorded: String,
    /// The replayed value.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub replayed: String,
}

impl ReplayView {
    /// An identical replay.
    pub fn identical() -> Self {
        Self {
            identical: true,
            turn: None,
            step: None,
            field: String::new(),
            recorded: String::new(),
            replayed: String::new(),
        }
    }

    /// The first difference.
    pub fn diverged(d: &Divergence) -> Self {
        Self {
            identical: false,
            turn: d.turn,
            step: d.step,
            field: d.field.to_string(),
            recorded: d.recorded.clone(),
            replayed: d.replayed.clone(),
        }
    }
}

/// One episode of the page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// Its line in the trajectories file (0-based, `replay --trajectory N`).
    pub line: usize,
    /// The iteration of its rollout.
    pub iteration: u32,
    /// `train` or `val`.
    pub split: &'static str,
    /// Env group.
    pub group: usize,
    /// Reset seed.
    pub seed: u64,
    /// RAGEN's success (`terminated && !truncated`).
    pub success: bool,
    /// The training score (env rewards + format penalty + reward functions).
    pub score: f64,
    /// Accumulated format penalty.
    pub penalty: f64,
    /// Reward-function plugins' reward.
    pub extra_reward: f64,
    /// Actions executed.
    pub num_actions: usize,
    /// Why it ended early, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// In-group std of its group's scores (filtered training rollouts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_std: Option<f64>,
    /// Whether the StarPO-S filter kept its group (filtered training rollouts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<bool>,
    /// The turns.
    pub turns: Vec<TurnView>,
    /// The state after the last action.
    #[serde(rename = "final")]
    pub final_obs: Observation,
    /// The replay's result, when the page was made with `--replay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayView>,
}

fn turn_view(t: &Turn, r: &Reading) -> TurnView {
    TurnView {
        obs: split_observation(&t.observation, &r.symbols),
        parts: parts(t, r.action_names.as_deref(), &r.action_sep),
        reward: t.env_reward,
        valid: t.action_is_valid,
        penalised: t.format_penalty,
        actions_left: t.actions_left,
        steps: t
            .steps
            .iter()
            .map(|s| match &s.outcome {
                Ok(o) => StepView {
                    action: s.action.clone(),
                    reward: Some(o.reward),
                    effective: o.action_is_effective,
                    error: None,
                    expert: s.expert.clone(),
                },
                Err(e) => StepView {
                    action: s.action.clone(),
                    reward: None,
                    effective: false,
                    error: Some(e.clone()),
                    expert: s.expert.clone(),
                },
            })
            .collect(),
    }
}

impl Episode {
    /// The episode of line `line`.
    pub fn new(line: usize, rec: &TrajectoryRecord, r: &Reading) -> Self {
        let t = &rec.trajectory;
        Self {
            line,
            iteration: rec.iteration,
            split: rec.split.name(),
            group: t.group,
            seed: t.seed,
            success: t.success,
            score: rec.score,
            penalty: t.penalty,
            extra_reward: t.extra_reward,
            num_actions: t.num_actions,
            end_reason: t.end_reason.clone(),
            group_std: rec.in_group_std,
            kept: rec.filter_kept,
            turns: t.turns.iter().map(|x| turn_view(x, r)).collect(),
            final_obs: split_observation(&t.final_observation, &r.symbols),
            replay: None,
        }
    }
}

/// Every `n`-th of `episodes` so that at most `cap` remain, spread evenly over the file (the
/// first always, so every iteration keeps its share); all of them without a cap.
pub fn sample(episodes: Vec<Episode>, cap: Option<usize>) -> Vec<Episode> {
    let n = episodes.len();
    match cap {
        Some(cap) if cap < n => {
            let picked: BTreeSet<usize> = (0..cap).map(|i| i * n / cap).collect();
            episodes
                .into_iter()
                .enumerate()
                .filter(|(i, _)| picked.contains(i))
                .map(|(_, e)| e)
                .collect()
        }
        _ => episodes,
    }
}
