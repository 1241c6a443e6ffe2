//! # ragen-sokoban: RAGEN's Sokoban as a ragen-gym environment plugin
//!
//! Rules from gym-sokoban as used by RAGEN (arXiv 2504.20073, §3 and appendix B.1; RAGEN
//! `ragen/env/sokoban/env.py`, gym-sokoban `gym_sokoban/envs/sokoban_env.py::step`): push
//! every box onto a target, actions `Up`/`Down`/`Left`/`Right`, reward -0.1 per step, +1/-1
//! for a box onto/off a target, +10 when solved; levels from the reverse-play generator
//! ([`generator`]).
//!
//! Configs (JSON, see [`SokobanConfig`]): `""` is RAGEN's `SimpleSokoban` (6x6, 1 box);
//! `{"dim_x":8,"dim_y":8,"num_boxes":2,"search_depth":10}` is `LargerSokoban`;
//! `{"search_depth":30,"grid_vocab":"alternate"}` is `SokobanDifferentGridVocab`;
//! `{"observation_format":"grid_coord"}` is RAGEN-2's `CoordSokoban` observation.
//!
//! ```
//! use ragen_gym_sdk::{Environment, adapter};
//! use ragen_sokoban::Sokoban;
//!
//! let mut env = adapter::create::<Sokoban>("").unwrap();
//! let first = env.reset(42).unwrap();
//! assert_eq!(first.observation.lines().count(), 6);
//! let step = env.step("Up").unwrap();
//! assert!(step.action_is_valid);
//! ```

#![deny(missing_docs)]

pub mod config;
pub mod env;
pub mod expert;
pub mod generator;
pub mod level;
pub mod observation;
#[cfg(test)]
mod solver;

pub use config::{GridVocab, ObservationFormat, SokobanConfig};
pub use env::Sokoban;
pub use expert::shortest_first_moves;
pub use generator::{Generated, generate};
pub use level::{Direction, Level, MoveOutcome, Tile};

ragen_gym_sdk::export_env!(Sokoban);
