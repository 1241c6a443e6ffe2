//! The [`Sokoban`] env: RAGEN's `SokobanEnv` (a gym-sokoban `SokobanEnv` subclass) behind the
//! SDK's [`Environment`] trait.
//!
//! Rewards (gym-sokoban, RAGEN paper appendix B.1): -0.1 per step (`penalty_for_step` in the
//! config), +1 when the number of boxes
//! on targets goes up, -1 when it goes down, +10 when every box is on a target. A 1-box level
//! solved in k moves returns 11 - 0.1k. The episode terminates when solved and is truncated
//! after `max_steps` steps.

use ragen_gym_sdk::{
    Advice, EnvError, EnvSpec, Environment, ExpertInfo, Metric, ResetResult, StepResult,
};

use crate::config::{ObservationFormat, SokobanConfig};
use crate::expert::shortest_first_moves;
use crate::generator::{self, MAX_SEED_ATTEMPTS};
use crate::level::{Direction, Level, legend};
use crate::observation::observe;

/// gym-sokoban `reward_box_on_target` (and its negative for pushing a box off).
pub const BOX_ON_TARGET_REWARD: f64 = 1.0;
/// gym-sokoban `reward_finished`.
pub const SOLVED_REWARD: f64 = 10.0;
/// RAGEN's `max_actions_per_traj` for every Sokoban tag.
pub const MAX_EPISODE_STEPS: u32 = 10;

const INSTRUCTION: &str = "You control the player in a Sokoban warehouse. Get every box onto a \
target. You move one cell per action; walking into a box pushes it one cell further, which only \
works if the cell behind the box is empty floor or a target. Walls block you and boxes, you can \
never pull a box, and a box pushed into a corner is stuck for good. Answer with a list of moves";
/// The end of the instruction with `answer_example` (RAGEN's Sokoban instruction has an example).
const EXAMPLE: &str = ", for example <answer>Up || Left || Left</answer>.";
/// Up/Down move along a column (row - 1, row + 1), Left/Right along a row: said when the
/// observation has coordinates, so that they can be read as moves.
const COORDINATE_MOVES: &str = " Up is row - 1, Down row + 1, Left column - 1, Right column + 1.";

/// The instruction for `config`: with or without the example answer, plus what a move does to
/// the coordinates when the observation shows them.
fn instruction(config: &SokobanConfig) -> String {
    let mut s = INSTRUCTION.to_string();
    s.push_str(if config.answer_example { EXAMPLE } else { "." });
    if config.observation_format == ObservationFormat::GridCoord {
        s.push_str(COORDINATE_MOVES);
    }
    s
}

/// One Sokoban env instance.
#[derive(Debug, Clone)]
pub struct Sokoban {
    config: SokobanConfig,
    episode: Option<Episode>,
}

#[derive(Debug, Clone)]
struct Episode {
    level: Level,
    num_env_steps: u32,
    done: bool,
}

impl Sokoban {
    /// An env with a config that passed `Environment::check_config`.
    pub fn with_config(config: SokobanConfig) -> Self {
        Self {
            config,
            episode: None,
        }
    }

    /// The current level, if reset.
    pub fn level(&self) -> Option<&Level> {
        self.episode.as_ref().map(|e| &e.level)
    }

    /// The env's config.
    pub fn config(&self) -> &SokobanConfig {
        &self.config
    }

    fn metrics(&self, level: &Level) -> Vec<Metric> {
        vec![
            Metric::new("boxes_on_target", level.boxes_on_target() as f64),
            Metric::new("num_boxes", level.boxes.len() as f64),
        ]
    }
}

impl Environment for Sokoban {
    const ID: &'static str = "ragen/Sokoban-v0";
    type Config = SokobanConfig;

    fn check_config(config: &SokobanConfig) -> Result<(), EnvError> {
        // The constraints documented on the fields of `SokobanConfig`; the SDK runs this after parsing
        // (`ragen_gym_sdk::adapter::config`), before `spec` and `new`.
        let bad = |field: &str, why: String| {
            Err(EnvError::InvalidConfig(format!("field `{field}`: {why}")))
        };
        for (field, value) in [("dim_x", config.dim_x), ("dim_y", config.dim_y)] {
            if !(4..=16).contains(&value) {
                return bad(field, format!("{value} is outside 4..=16"));
            }
        }
        if !(1..=10).contains(&config.num_boxes) {
            return bad(
                "num_boxes",
                format!("{} is outside 1..=10", config.num_boxes),
            );
        }
        if (config.dim_x, config.dim_y) == (4, 4) {
            // Its 2x2 interior is all corners, where a box off its target can never move.
            return bad(
                "dim_x",
                "a 4x4 room admits no solvable level (every floor cell is a corner)".to_string(),
            );
        }
        // Generated levels leave every box off its target (gym-sokoban `reverse_playing` keeps
        // only states with every target uncovered), so boxes, targets and the player take
        // 2k + 1 distinct cells, and the player needs at least one more to move.
        let interior = (config.dim_x - 2) * (config.dim_y - 2);
        if 2 * config.num_boxes + 2 > interior {
            return bad(
                "num_boxes",
                format!(
                    "{} boxes, their targets and the player need {} floor cells but a {}x{} \
                     room has {interior}",
                    config.num_boxes,
                    2 * config.num_boxes + 2,
                    config.dim_x,
                    config.dim_y
                ),
            );
        }
        if config.max_steps == 0 {
            return bad("max_steps", "must be at least 1".to_string());
        }
        if !(1..=1000).contains(&config.search_depth) {
            return bad(
                "search_depth",
                format!("{} is outside 1..=1000", config.search_depth),
            );
        }
        if !(-1.0..=0.0).contains(&config.penalty_for_step) {
            return bad(
                "penalty_for_step",
                format!("{} is outside -1..=0", config.penalty_for_step),
            );
        }
        Ok(())
    }

    fn spec(config: &SokobanConfig) -> EnvSpec {
        EnvSpec::new(instruction(config))
            .actions(Direction::ALL.iter().map(|d| d.name()))
            .legend(legend(config.grid_vocab))
            .max_steps(MAX_EPISODE_STEPS)
    }

    fn new(config: SokobanConfig) -> Result<Self, EnvError> {
        Ok(Self::with_config(config))
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        let generated = generator::generate(&self.config, seed).ok_or_else(|| {
            EnvError::Other(format!(
                "no solvable level found for seed {seed} within {MAX_SEED_ATTEMPTS} derived seeds"
            ))
        })?;
        let mut info = self.metrics(&generated.level);
        info.push(Metric::new(
            "box_displacement",
            generated.displacement as f64,
        ));
        info.push(Metric::new(
            "seed_attempts",
            f64::from(generated.seed_attempts),
        ));
        let observation = observe(&generated.level, &self.config);
        self.episode = Some(Episode {
            level: generated.level,
            num_env_steps: 0,
            done: false,
        });
        Ok(ResetResult { observation, info })
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let max_steps = self.config.max_steps;
        let config = self.config.clone();
        let episode = self
            .episode
            .as_mut()
            .ok_or_else(|| EnvError::NotReady("step called before reset".to_string()))?;
        if episode.done {
            return Err(EnvError::NotReady(
                "the episode has ended; call reset".to_string(),
            ));
        }
        let Some(dir) = Direction::parse(action) else {
            let level = episode.level.clone();
            return Ok(StepResult {
                observation: observe(&level, &config),
                reward: 0.0,
                terminated: false,
                truncated: false,
                action_is_valid: false,
                action_is_effective: false,
                success: level.is_solved(),
                info: self.metrics(&level),
            });
        };
        let before = episode.level.boxes_on_target();
        let outcome = episode.level.apply(dir);
        let after = episode.level.boxes_on_target();
        episode.num_env_steps += 1;
        let solved = episode.level.is_solved();
        let mut reward = config.penalty_for_step;
        if after > before {
            reward += BOX_ON_TARGET_REWARD;
        } else if after < before {
            reward -= BOX_ON_TARGET_REWARD;
        }
        if solved {
            reward += SOLVED_REWARD;
        }
        let truncated = !solved && episode.num_env_steps >= max_steps;
        episode.done = solved || truncated;
        let level = episode.level.clone();
        let mut info = self.metrics(&level);
        info.push(Metric::new(
            "box_pushed",
            f64::from(u8::from(outcome.pushed)),
        ));
        Ok(StepResult {
            observation: observe(&level, &config),
            reward,
            terminated: solved,
            truncated,
            action_is_valid: true,
            action_is_effective: outcome.moved,
            success: solved,
            info,
        })
    }

    fn expert_info(_config: &SokobanConfig) -> Option<ExpertInfo> {
        Some(ExpertInfo {
            description: "the next move of a shortest plan (breadth-first search over player and \
                          box positions)"
                .into(),
            optimal: true,
        })
    }

    /// Every first move of a shortest plan; success is certain when the plan fits in the steps
    /// left (the spec's action budget and `max_steps`), else impossible. The host's budget per
    /// episode may be smaller (`agent_proxy`'s turns x actions); the spec's is what is known here.
    fn expert(&mut self) -> Result<Advice, EnvError> {
        let budget = MAX_EPISODE_STEPS.min(self.config.max_steps);
        let episode = match &self.episode {
            Some(e) if !e.done => e,
            _ => return Err(EnvError::NotReady("no episode running; call reset".into())),
        };
        let left = budget.saturating_sub(episode.num_env_steps);
        Ok(match shortest_first_moves(&episode.level) {
            Some((length, moves)) => Advice {
                actions: moves.iter().map(|d| d.name().to_string()).collect(),
                success_probability: Some(if length <= left { 1.0 } else { 0.0 }),
            },
            // Unsolvable (a box stuck), or too large to search: no move to recommend.
            None => Advice {
                actions: Vec::new(),
                success_probability: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridVocab;
    use crate::solver::shortest_solution;
    use ragen_gym_sdk::adapter;

    fn env_at(text: &str) -> Sokoban {
        let level = Level::parse(text, GridVocab::Standard).unwrap();
        let mut env = Sokoban::with_config(SokobanConfig::default());
        env.episode = Some(Episode {
            level,
            num_env_steps: 0,
            done: false,
        });
        env
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn pushing_into_a_wall_costs_the_step_penalty_and_is_not_effective() {
        let mut env = env_at("#####\n#P__#\n#X__#\n#O__#\n#####");
        let before = env.level().unwrap().clone();
        let r = env.step("Up").unwrap();
        assert!(close(r.reward, -0.1));
        assert!(r.action_is_valid && !r.action_is_effective);
        assert!(!r.terminated && !r.truncated && !r.success);
        assert_eq!(env.level().unwrap(), &before);
    }

    #[test]
    fn box_onto_a_target_pays_one_minus_the_penalty_and_solving_adds_ten() {
        // Two boxes: the first on target gives +1 - 0.1 = 0.9, the second solves: 10.9.
        let mut env = env_at("#######\n#PXO__#\n#_____#\n#_XO__#\n#######");
        let r = env.step("Right").unwrap();
        assert!(close(r.reward, 0.9), "{}", r.reward);
        assert!(!r.terminated && r.action_is_effective);
        assert_eq!(r.info[0], Metric::new("boxes_on_target", 1.0));
        for a in ["Left", "Down", "Down"] {
            assert!(close(env.step(a).unwrap().reward, -0.1));
        }
        let r = env.step("right").unwrap();
        assert!(close(r.reward, 10.9), "{}", r.reward);
        assert!(r.terminated && r.success && !r.truncated);
        assert!(matches!(env.step("Up"), Err(EnvError::NotReady(_))));
    }

    #[test]
    fn pushing_a_box_off_a_target_costs_one() {
        let mut env = env_at("######\n#P\u{221a}_X#\n#___O#\n######");
        let r = env.step("Right").unwrap();
        assert!(close(r.reward, -1.1), "{}", r.reward);
        assert!(r.action_is_effective && !r.terminated);
    }

    #[test]
    fn box_against_a_wall_cannot_be_pushed() {
        let mut env = env_at("#####\n#_PX#\n#__O#\n#####");
        let r = env.step("Right").unwrap();
        assert!(!r.action_is_effective && close(r.reward, -0.1));
        assert_eq!(r.observation, "#####\n#_PX#\n#__O#\n#####");
    }

    #[test]
    fn a_generated_level_solved_in_k_moves_returns_11_minus_k_tenths() {
        let mut env = adapter::create::<Sokoban>("").unwrap();
        for seed in [0, 1, 2, 3, 42] {
            env.reset(seed).unwrap();
            let plan = shortest_solution(env.level().unwrap(), 1_000_000).unwrap();
            let mut total = 0.0;
            let mut last = None;
            for dir in &plan {
                let r = env.step(dir.name()).unwrap();
                total += r.reward;
                last = Some(r);
            }
            let k = plan.len() as f64;
            assert!(
                close(total, 11.0 - 0.1 * k),
                "seed {seed}: {total} after {k} moves"
            );
            assert!(last.unwrap().success);
        }
    }

    #[test]
    fn penalty_for_step_sets_every_steps_reward_and_nothing_else() {
        // The two-box walk above with penalty_for_step = 0: 1, 0, 0, 0, 11 (by hand: box on
        // target +1, three free moves, the solve +1 + 10); with -0.5: 0.5, -0.5 x 3, 10.5.
        for (penalty, want) in [
            (0.0, [1.0, 0.0, 0.0, 0.0, 11.0]),
            (-0.5, [0.5, -0.5, -0.5, -0.5, 10.5]),
        ] {
            let mut env = env_at("#######\n#PXO__#\n#_____#\n#_XO__#\n#######");
            env.config.penalty_for_step = penalty;
            for (a, want) in ["Right", "Left", "Down", "Down", "Right"].iter().zip(want) {
                let r = env.step(a).unwrap();
                assert!(
                    close(r.reward, want),
                    "{penalty}, {a}: {} != {want}",
                    r.reward
                );
            }
        }
        // a wall bump without the penalty pays nothing
        let mut env = env_at("#####\n#P__#\n#X__#\n#O__#\n#####");
        env.config.penalty_for_step = 0.0;
        assert!(close(env.step("Up").unwrap().reward, 0.0));
        // from JSON, and refused outside -1..=0 with the field named
        let zero = adapter::create::<Sokoban>(r#"{"penalty_for_step":0}"#).unwrap();
        assert!(close(zero.config.penalty_for_step, 0.0));
        for bad in ["0.1", "-1.5"] {
            let json = format!(r#"{{"penalty_for_step":{bad}}}"#);
            let err = adapter::spec::<Sokoban>(&json).unwrap_err();
            assert!(
                matches!(&err, EnvError::InvalidConfig(m) if m.contains("penalty_for_step")),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn max_steps_ends_the_episode_as_truncated() {
        let mut env = env_at("#####\n#P__#\n#X__#\n#O__#\n#####");
        env.config.max_steps = 3;
        let results: Vec<StepResult> = (0..3).map(|_| env.step("Up").unwrap()).collect();
        assert!(!results[1].truncated);
        assert!(results[2].truncated && !results[2].terminated && !results[2].success);
    }

    #[test]
    fn invalid_action_changes_nothing() {
        let mut env = adapter::create::<Sokoban>("").unwrap();
        let first = env.reset(11).unwrap().observation;
        let r = env.step("jump").unwrap();
        assert!(!r.action_is_valid && !r.action_is_effective);
        assert_eq!(r.reward, 0.0);
        assert_eq!(r.observation, first);
        assert!(matches!(
            adapter::create::<Sokoban>("").unwrap().step("Up"),
            Err(EnvError::NotReady(_))
        ));
    }

    #[test]
    fn spec_follows_the_config() {
        let spec = adapter::spec::<Sokoban>("").unwrap();
        assert_eq!(spec.id, "ragen/Sokoban-v0");
        assert_eq!(spec.max_episode_steps, 10);
        assert_eq!(spec.action_names.unwrap(), ["Up", "Down", "Left", "Right"]);
        let legend: String = spec
            .symbol_legend
            .unwrap()
            .iter()
            .map(|s| s.symbol.clone())
            .collect();
        assert_eq!(legend, "#_O\u{221a}XPS");
        let alt = adapter::spec::<Sokoban>(r#"{"grid_vocab":"alternate"}"#).unwrap();
        let legend: String = alt
            .symbol_legend
            .unwrap()
            .iter()
            .map(|s| s.symbol.clone())
            .collect();
        assert_eq!(legend, "W.GCBA@");
        assert_eq!(
            adapter::config::<Sokoban>(&spec.default_config).unwrap(),
            SokobanConfig::default()
        );
        assert!(
            matches!(adapter::spec::<Sokoban>(r#"{"boxes":2}"#), Err(EnvError::InvalidConfig(m)) if m.contains("boxes"))
        );
    }

    #[test]
    fn the_answer_example_is_optional() {
        let with = adapter::spec::<Sokoban>("").unwrap().instruction;
        assert!(
            with.ends_with(
                "Answer with a list of moves, for example <answer>Up || Left || Left</answer>."
            ),
            "{with}"
        );
        let without = adapter::spec::<Sokoban>(r#"{"answer_example":false}"#)
            .unwrap()
            .instruction;
        assert!(
            without.ends_with("Answer with a list of moves."),
            "{without}"
        );
        assert!(!without.contains("<answer>"));
    }

    #[test]
    fn grid_coord_observations_follow_the_player() {
        let config = r#"{"observation_format":"grid_coord"}"#;
        let spec = adapter::spec::<Sokoban>(config).unwrap();
        assert!(
            spec.instruction
                .ends_with("Up is row - 1, Down row + 1, Left column - 1, Right column + 1.")
        );
        let mut env = adapter::create::<Sokoban>(config).unwrap();
        let mut grid_env = adapter::create::<Sokoban>("").unwrap();
        let first = env.reset(5).unwrap().observation;
        let grid = grid_env.reset(5).unwrap().observation;
        // same level, the coordinates first
        assert!(first.ends_with(&format!("\nGrid:\n{grid}")), "{first}");
        let player = |obs: &str| {
            obs.lines()
                .find_map(|l| {
                    l.strip_prefix("Player: ")
                        .or(l.strip_prefix("Player on target: "))
                })
                .unwrap()
                .to_string()
        };
        let level = env.level().unwrap().clone();
        let (r, c) = (level.player / level.cols, level.player % level.cols);
        assert_eq!(player(&first), format!("({r}, {c})"));
        // each move shifts the player's coordinates as the instruction says
        for (dir, (dr, dc)) in [
            ("Up", (-1, 0)),
            ("Down", (1, 0)),
            ("Left", (0, -1)),
            ("Right", (0, 1)),
        ] {
            let before = env.level().unwrap().player;
            let step = env.step(dir).unwrap();
            let after = env.level().unwrap().player;
            let expected = if step.action_is_effective {
                let r = (before / level.cols) as i64 + dr;
                let c = (before % level.cols) as i64 + dc;
                format!("({r}, {c})")
            } else {
                assert_eq!(after, before);
                format!("({}, {})", before / level.cols, before % level.cols)
            };
            assert_eq!(player(&step.observation), expected, "{dir}");
            if step.terminated {
                break;
            }
        }
    }

    #[test]
    fn alternate_vocab_renders_the_observation() {
        let mut env =
            adapter::create::<Sokoban>(r#"{"grid_vocab":"alternate","search_depth":30}"#).unwrap();
        let obs = env.reset(3).unwrap().observation;
        assert!(obs.chars().all(|c| "W.GCBA@\n".contains(c)), "{obs}");
        assert_eq!(obs.lines().count(), 6);
    }

    proptest::proptest! {
        #[test]
        fn same_seed_and_actions_give_the_same_episode(seed in 0u64..1_000_000, actions in proptest::collection::vec(0usize..5, 0..20)) {
            let names = ["Up", "Down", "Left", "Right", "Wait"];
            let run = || {
                let mut env = adapter::create::<Sokoban>("").unwrap();
                let mut trace = vec![format!("{:?}", env.reset(seed).unwrap())];
                for &a in &actions {
                    trace.push(format!("{:?}", env.step(names[a])));
                }
                trace
            };
            proptest::prop_assert_eq!(run(), run());
        }
    }
}
