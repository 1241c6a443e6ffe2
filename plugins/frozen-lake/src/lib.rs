//! # ragen-frozen-lake: RAGEN's FrozenLake as a ragen-gym environment plugin
//!
//! Gymnasium's FrozenLake with RAGEN's random maps (arXiv 2504.20073 §3; RAGEN
//! `ragen/env/frozen_lake/env.py` over gymnasium `gymnasium/envs/toy_text/frozen_lake.py`):
//! a 4x4 map per seed with P(frozen) = 0.8, distinct random start and goal, the goal always
//! reachable; slippery moves (intended direction 1/3, each perpendicular 1/3); reward 1 at the
//! goal; the episode ends in a hole or at the goal. Actions in RAGEN's order `Left`, `Down`,
//! `Right`, `Up`; symbols `P _ O G X √`. Its expert ([`expert`]) is optimal by value iteration,
//! or greedy (`{"expert": "greedy"}`), or plans for a model that sees the board only when a turn
//! of `k` moves begins (`{"expert_moves_per_turn": k}`, [`turn_plan`]).
//!
//! ```
//! use ragen_gym_sdk::{Environment, adapter};
//! use ragen_frozen_lake::FrozenLake;
//!
//! let mut env = adapter::create::<FrozenLake>(r#"{"is_slippery": false}"#).unwrap();
//! let first = env.reset(7).unwrap();
//! assert_eq!(first.observation.lines().count(), 4);
//! assert!(env.step("Down").unwrap().action_is_valid);
//! ```

#![deny(missing_docs)]

pub mod config;
pub mod env;
pub mod expert;
pub mod map;
pub mod observation;
pub mod turn_plan;

pub use config::{ExpertKind, FrozenLakeConfig, ObservationFormat};
pub use env::FrozenLake;
pub use map::{Cell, LakeMap};

ragen_gym_sdk::export_env!(FrozenLake);
