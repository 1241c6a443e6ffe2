//! The Sokoban env config (JSON, strict) and the three RAGEN tags as constructors.
//!
//! Keys and defaults follow RAGEN's `SokobanEnvConfig` with the `SimpleSokoban` tag of
//! `config/envs.yaml` applied (6x6, one box, `max_steps` 100, `search_depth` 300). RAGEN's
//! `dim_room` tuple is only available as `dim_x`/`dim_y`, and its `grid_lookup`/`grid_vocab`
//! dictionaries are replaced by the [`GridVocab`] choice. `observation_format` follows RAGEN-2
//! (mll-lab-nu/RAGEN `ragen/env/sokoban/env.py`, the `CoordSokoban` tag); `answer_example` is
//! ragen-gym's own.

use serde::{Deserialize, Serialize};

/// gym-sokoban `penalty_for_step`, the config's default.
pub const STEP_PENALTY: f64 = -0.1;

/// Which set of text symbols observations use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GridVocab {
    /// RAGEN's default symbols `# _ O √ X P S` (wall, empty, target, box on target, box,
    /// player, player on target).
    #[default]
    Standard,
    /// The `SokobanDifferentGridVocab` tag's symbols `W . G C B A @`, same order.
    Alternate,
}

/// How the state is shown to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationFormat {
    /// The grid of symbols, one line per row (RAGEN v1).
    #[default]
    Grid,
    /// Zero-indexed `(row, column)` coordinates of the player, the boxes and the targets, then
    /// the grid (RAGEN-2's `grid_coord`, which also lists every wall; here the walls are left to
    /// the grid). A grid row tokenises into runs of symbols (`####`, `__`), so a cell's column is
    /// not a token position; the coordinates state it.
    GridCoord,
}

/// Configuration of one Sokoban env (the plugin's config JSON).
///
/// Example (RAGEN's `LargerSokoban` tag):
/// `{"dim_x": 8, "dim_y": 8, "num_boxes": 2, "search_depth": 10}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SokobanConfig {
    /// Rows of the room, border walls included (RAGEN `dim_x`, i.e. `dim_room[0]`). 4..=16.
    pub dim_x: u32,
    /// Columns of the room, border walls included (RAGEN `dim_y`). 4..=16.
    pub dim_y: u32,
    /// Boxes (and targets). 1..=10, and at most `(interior cells - 2) / 2` (each box, its
    /// target and the player on distinct cells plus one free cell); a 4x4 room is refused.
    pub num_boxes: u32,
    /// Steps after which an unsolved episode ends as truncated (gym-sokoban `max_steps`).
    pub max_steps: u32,
    /// Time-to-live of the reverse-play depth-first search (RAGEN `search_depth`). 1..=1000;
    /// the bound keeps the recursion within the plugin's stack.
    pub search_depth: u32,
    /// Text symbols of observations.
    pub grid_vocab: GridVocab,
    /// `"grid"` (RAGEN v1) or `"grid_coord"` (coordinates, then the grid; RAGEN-2).
    pub observation_format: ObservationFormat,
    /// Whether the instruction ends with an example answer (`<answer>Up || Left || Left</answer>`,
    /// as RAGEN's Sokoban instruction has one). `false` drops it: with constrained action decoding
    /// the format is enforced anyway, and a small model copies the example's moves.
    pub answer_example: bool,
    /// The reward of every step (gym-sokoban `SokobanEnv.penalty_for_step`, -0.1, RAGEN's value).
    /// Finite, in -1..=0. `0` leaves the rewards of box moves and of the solve: an unsolved episode
    /// then scores by its boxes only, not by how few moves it made (README, "Learning on a
    /// laptop", says why the CPU preset uses it).
    pub penalty_for_step: f64,
}

impl Default for SokobanConfig {
    fn default() -> Self {
        Self {
            dim_x: 6,
            dim_y: 6,
            num_boxes: 1,
            max_steps: 100,
            search_depth: 300,
            grid_vocab: GridVocab::Standard,
            observation_format: ObservationFormat::Grid,
            answer_example: true,
            penalty_for_step: STEP_PENALTY,
        }
    }
}

impl SokobanConfig {
    /// RAGEN's `LargerSokoban` tag: 8x8, two boxes, `search_depth` 10.
    pub fn larger() -> Self {
        Self {
            dim_x: 8,
            dim_y: 8,
            num_boxes: 2,
            search_depth: 10,
            ..Self::default()
        }
    }

    /// RAGEN's `SokobanDifferentGridVocab` tag: 6x6, one box, `search_depth` 30, symbols
    /// `W . G C B A @`.
    pub fn different_grid_vocab() -> Self {
        Self {
            search_depth: 30,
            grid_vocab: GridVocab::Alternate,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::EnvError;

    /// `json` parsed and checked the way the host does it ([`ragen_gym_sdk::adapter::config`]).
    fn parse(json: &str) -> Result<SokobanConfig, EnvError> {
        ragen_gym_sdk::adapter::config::<crate::Sokoban>(json)
    }

    #[test]
    fn empty_config_gives_ragen_simple_sokoban_defaults() {
        let config = parse("").unwrap();
        assert_eq!((config.dim_x, config.dim_y, config.num_boxes), (6, 6, 1));
        assert_eq!((config.max_steps, config.search_depth), (100, 300));
        assert_eq!(config.observation_format, ObservationFormat::Grid);
        assert!(config.answer_example);
        let coord = parse(r#"{"observation_format":"grid_coord"}"#).unwrap();
        assert_eq!(coord.observation_format, ObservationFormat::GridCoord);
    }

    #[test]
    fn larger_sokoban_is_expressible_as_json() {
        let config = parse(r#"{"dim_x":8,"dim_y":8,"num_boxes":2,"search_depth":10}"#).unwrap();
        assert_eq!(config, SokobanConfig::larger());
        let alt = parse(r#"{"search_depth":30,"grid_vocab":"alternate"}"#).unwrap();
        assert_eq!(alt, SokobanConfig::different_grid_vocab());
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |json: &str| match parse(json) {
            Err(EnvError::InvalidConfig(msg)) => msg,
            other => panic!("expected invalid config for {json}, got {other:?}"),
        };
        assert!(err(r#"{"dim_z":3}"#).contains("dim_z"));
        assert!(err(r#"{"num_boxes":"two"}"#).contains("num_boxes"));
        assert!(err(r#"{"dim_x":6,"num_boxes":-1}"#).contains("num_boxes"));
        assert!(err(r#"{"dim_x":3}"#).contains("dim_x"));
        assert!(err(r#"{"dim_x":4,"dim_y":4}"#).contains("4x4"));
        // 5x5 has 9 interior cells: 3 boxes fit (8 cells), 4 do not (10).
        assert!(parse(r#"{"dim_x":5,"dim_y":5,"num_boxes":3}"#).is_ok());
        assert!(err(r#"{"dim_x":5,"dim_y":5,"num_boxes":4}"#).contains("need 10 floor cells"));
        assert!(err(r#"{"grid_vocab":"emoji"}"#).contains("grid_vocab"));
        assert!(err(r#"{"observation_format":"coords"}"#).contains("observation_format"));
        assert!(err(r#"{"answer_example":1}"#).contains("answer_example"));
        assert!(err(r#"{"search_depth":0}"#).contains("search_depth"));
        assert!(err("[1]").contains("object"));
    }
}
