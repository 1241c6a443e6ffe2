//! The FrozenLake env config (JSON, strict).
//!
//! Keys and defaults follow RAGEN's `FrozenLakeEnvConfig` (`size` 4, `p` 0.8, `is_slippery`)
//! plus gymnasium's `success_rate` (1/3). RAGEN's `map_seed` is always the episode seed here.
//! `observation_format` follows RAGEN-2 (mll-lab-nu/RAGEN `ragen/env/frozen_lake/env.py`, the
//! `CoordFrozenLake` tag); `answer_example` and `max_steps` (gymnasium's `TimeLimit`, which RAGEN
//! does not use) are ragen-gym's own.

use serde::{Deserialize, Serialize};

/// How the state is shown to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationFormat {
    /// The grid of symbols, one line per row (RAGEN v1).
    #[default]
    Grid,
    /// Zero-indexed `(row, column)` coordinates of the player, the goal and the holes, then the
    /// grid (RAGEN-2's `grid_coord`). A grid row tokenises into runs of symbols (`__`, `_G`), so a
    /// cell's column is not a token position; the coordinates state it.
    GridCoord,
}

/// Which policy the env's expert follows (`ragen:gym/expert`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertKind {
    /// An action that maximises the probability of reaching the goal within the steps left
    /// (value iteration over the slip model).
    #[default]
    Optimal,
    /// The next move of a shortest hole-free path to the goal, ignoring slips ("greedy towards
    /// the goal": a baseline between random and optimal).
    Greedy,
}

/// Configuration of one FrozenLake env (the plugin's config JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FrozenLakeConfig {
    /// Side of the square map. 2..=16.
    pub size: u32,
    /// Probability that a cell is frozen (so `1 - p` is the hole probability). In (0, 1].
    pub p: f64,
    /// Whether moves slip (gymnasium `is_slippery`).
    pub is_slippery: bool,
    /// Probability that a slippery move goes the intended way; each perpendicular direction gets
    /// half of the rest (gymnasium `success_rate`). In [0, 1].
    pub success_rate: f64,
    /// `"grid"` (RAGEN v1) or `"grid_coord"` (coordinates, then the grid; RAGEN-2).
    pub observation_format: ObservationFormat,
    /// Whether the instruction ends with an example answer (`<answer>Down || Right</answer>`,
    /// as RAGEN's Sokoban-style instructions have one). `false` drops it: with constrained
    /// action decoding the format is enforced anyway, and a small model copies the example.
    pub answer_example: bool,
    /// Steps after which an episode that has not ended is truncated (gymnasium's `TimeLimit`);
    /// 0, the default, means no limit, as in RAGEN (the host's action budget still applies).
    pub max_steps: u32,
    /// `"optimal"` (the default) or `"greedy"`: the policy of the env's expert. Changes nothing
    /// else.
    pub expert: ExpertKind,
    /// 0, the default: the optimal expert sees every state (closed loop). `k` in 1..=5: it
    /// plans for a model that sees the board only when a turn of `k` moves begins, turns counted
    /// from the episode's start (`crate::turn_plan`); set it to the rollout's
    /// `max_actions_per_turn` so that demonstrations (`ragen-gym sft`) hold only what a model
    /// could choose from its observation. Needs `"expert": "optimal"`. The env sees steps, not
    /// turns: after a model's turn of fewer than `k` moves, the expert still counts turns of
    /// `k` from the start, so its advice (and `expert_agreement`) follows the plan of the turn it
    /// counted.
    pub expert_moves_per_turn: u32,
}

impl Default for FrozenLakeConfig {
    fn default() -> Self {
        Self {
            size: 4,
            p: 0.8,
            is_slippery: true,
            success_rate: 1.0 / 3.0,
            observation_format: ObservationFormat::Grid,
            answer_example: true,
            max_steps: 0,
            expert: ExpertKind::Optimal,
            expert_moves_per_turn: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::EnvError;

    /// `json` parsed and checked the way the host does it ([`ragen_gym_sdk::adapter::config`]).
    fn parse(json: &str) -> Result<FrozenLakeConfig, EnvError> {
        ragen_gym_sdk::adapter::config::<crate::FrozenLake>(json)
    }

    #[test]
    fn defaults_are_ragens() {
        let config = parse(" ").unwrap();
        assert_eq!(config.size, 4);
        assert_eq!(config.p, 0.8);
        assert!(config.is_slippery);
        assert_eq!(config.success_rate, 1.0 / 3.0);
        assert_eq!(config.observation_format, ObservationFormat::Grid);
        assert!(config.answer_example);
        assert_eq!(config.max_steps, 0);
        let c =
            parse(r#"{"observation_format":"grid_coord","answer_example":false,"max_steps":4}"#)
                .unwrap();
        assert_eq!(
            (c.observation_format, c.answer_example, c.max_steps),
            (ObservationFormat::GridCoord, false, 4)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |json: &str| match parse(json) {
            Err(EnvError::InvalidConfig(msg)) => msg,
            other => panic!("expected invalid config for {json}, got {other:?}"),
        };
        assert!(err(r#"{"slippery":true}"#).contains("slippery"));
        assert!(err(r#"{"size":4,"is_slippery":"yes"}"#).contains("is_slippery"));
        assert!(err(r#"{"p":0}"#).contains("`p`"));
        assert!(err(r#"{"success_rate":1.5}"#).contains("success_rate"));
        assert!(err(r#"{"size":1}"#).contains("size"));
        assert!(err(r#"{"observation_format":"coord"}"#).contains("observation_format"));
        assert!(err(r#"{"max_steps":-1}"#).contains("max_steps"));
        assert!(err(r#"{"expert":"random"}"#).contains("expert"));
        assert!(err(r#"{"expert_moves_per_turn":6}"#).contains("expert_moves_per_turn"));
        let greedy = err(r#"{"expert":"greedy","expert_moves_per_turn":2}"#);
        assert!(greedy.contains("expert_moves_per_turn") && greedy.contains("optimal"));
        assert!(err("not json").contains("JSON"));
    }
}
