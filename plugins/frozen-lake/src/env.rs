//! The [`FrozenLake`] env: RAGEN's `FrozenLakeEnv` (a gymnasium `FrozenLakeEnv` subclass with a
//! random map per seed) behind the SDK's [`Environment`] trait.
//!
//! Dynamics (gymnasium): a slippery move goes in the intended direction with probability
//! `success_rate` (1/3) and in each perpendicular direction with probability
//! `(1 - success_rate) / 2`; moving into the edge leaves the player in place. Reward 1 on
//! reaching the goal, else 0. The episode terminates in a hole or at the goal (no time limit:
//! RAGEN does not use gymnasium's `TimeLimit`).
//!
//! Randomness: the map comes from `ChaCha8Rng::seed_from_u64(seed)` and the slips from the same
//! seed on ChaCha stream 1, so a seed fixes both (as RAGEN's `reset(seed)` does).

use ragen_gym_sdk::{
    Advice, EnvError, EnvSpec, Environment, ExpertInfo, Metric, ResetResult, StepResult,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{ExpertKind, FrozenLakeConfig, ObservationFormat};
use crate::expert;
use crate::map::{Cell, LakeMap, MAX_MAP_ATTEMPTS};
use crate::observation::observe;
use crate::turn_plan::{MAX_MOVES_PER_TURN, TurnPlan, TurnPlanner, TurnValues};

/// Action names in RAGEN's order (`action_lookup` 1..=4 = gymnasium LEFT, DOWN, RIGHT, UP).
pub const ACTION_NAMES: [&str; 4] = ["Left", "Down", "Right", "Up"];
/// RAGEN's `max_actions_per_traj` for the FrozenLake tag.
pub const MAX_EPISODE_STEPS: u32 = 10;
/// RAGEN's `grid_vocab`: symbol and meaning.
pub const LEGEND: [(&str, &str); 6] = [
    ("P", "player"),
    ("_", "empty"),
    ("O", "hole"),
    ("G", "goal"),
    ("X", "player in hole"),
    ("\u{221a}", "player on goal"),
];

const INSTRUCTION: &str = "You walk on a frozen lake and must reach the goal G without falling \
into a hole O. The ice is slippery: a move can send you sideways instead of where you meant to \
go, and walking off the edge leaves you where you are. Answer with a list of moves";
/// The end of the instruction with `answer_example`.
const EXAMPLE: &str = ", for example <answer>Down || Right</answer>.";
/// What a move does to the coordinates, said when the observation shows them.
const COORDINATE_MOVES: &str = " Up is row - 1, Down row + 1, Left column - 1, Right column + 1.";

/// The instruction for `config`: with or without the example answer, plus what a move does to
/// the coordinates when the observation shows them.
fn instruction(config: &FrozenLakeConfig) -> String {
    let mut s = INSTRUCTION.to_string();
    s.push_str(if config.answer_example { EXAMPLE } else { "." });
    if config.observation_format == ObservationFormat::GridCoord {
        s.push_str(COORDINATE_MOVES);
    }
    s
}

/// One FrozenLake env instance.
#[derive(Debug, Clone)]
pub struct FrozenLake {
    config: FrozenLakeConfig,
    episode: Option<Episode>,
}

#[derive(Debug, Clone)]
struct Episode {
    map: LakeMap,
    player: usize,
    rng: ChaCha8Rng,
    steps: u32,
    done: bool,
    /// The player's cell when the current turn began (`expert_moves_per_turn` > 0).
    turn_start: usize,
    /// The expert's plan for the turn that began at this step, once asked.
    plan: Option<(u32, TurnPlan)>,
    /// The turn planner's memo for this episode's map.
    turn_values: TurnValues,
}

impl FrozenLake {
    /// An env with a config that passed `Environment::check_config`.
    pub fn with_config(config: FrozenLakeConfig) -> Self {
        Self {
            config,
            episode: None,
        }
    }

    /// The current map and player cell, if reset.
    pub fn state(&self) -> Option<(&LakeMap, usize)> {
        self.episode.as_ref().map(|e| (&e.map, e.player))
    }

    /// Draw the direction actually taken for intended gymnasium direction `intended`.
    /// Outcomes are ordered `[(a - 1) % 4, a, (a + 1) % 4]` and picked as the first whose
    /// cumulative probability exceeds a uniform draw (gymnasium's `categorical_sample`).
    fn sample_direction(&self, intended: usize, rng: &mut ChaCha8Rng) -> usize {
        if !self.config.is_slippery {
            return intended;
        }
        let side = (1.0 - self.config.success_rate) / 2.0;
        let outcomes = [
            ((intended + 3) % 4, side),
            (intended, self.config.success_rate),
            ((intended + 1) % 4, side),
        ];
        let u = rng.random::<f64>();
        let mut cumulative = 0.0;
        for (dir, prob) in outcomes {
            cumulative += prob;
            if cumulative > u {
                return dir;
            }
        }
        outcomes[2].0
    }
}

impl Environment for FrozenLake {
    const ID: &'static str = "ragen/FrozenLake-v0";
    type Config = FrozenLakeConfig;

    fn check_config(config: &FrozenLakeConfig) -> Result<(), EnvError> {
        // The constraints documented on the fields of `FrozenLakeConfig`; the SDK runs this after parsing
        // (`ragen_gym_sdk::adapter::config`), before `spec` and `new`.
        let bad = |field: &str, why: String| {
            Err(EnvError::InvalidConfig(format!("field `{field}`: {why}")))
        };
        if !(2..=16).contains(&config.size) {
            return bad("size", format!("{} is outside 2..=16", config.size));
        }
        if !(config.p > 0.0 && config.p <= 1.0) {
            return bad("p", format!("{} is outside (0, 1]", config.p));
        }
        if !(0.0..=1.0).contains(&config.success_rate) {
            return bad(
                "success_rate",
                format!("{} is outside [0, 1]", config.success_rate),
            );
        }
        let k = config.expert_moves_per_turn;
        if k > MAX_MOVES_PER_TURN {
            return bad(
                "expert_moves_per_turn",
                format!("{k} is outside 0..={MAX_MOVES_PER_TURN}"),
            );
        }
        if k > 0 && config.expert != ExpertKind::Optimal {
            return bad(
                "expert_moves_per_turn",
                "turns are planned by the optimal expert only (`\"expert\": \"optimal\"`)".into(),
            );
        }
        Ok(())
    }

    fn spec(config: &FrozenLakeConfig) -> EnvSpec {
        EnvSpec::new(instruction(config))
            .actions(ACTION_NAMES)
            .legend(LEGEND.iter().copied())
            .max_steps(MAX_EPISODE_STEPS)
    }

    fn new(config: FrozenLakeConfig) -> Result<Self, EnvError> {
        Ok(Self::with_config(config))
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        let mut map_rng = ChaCha8Rng::seed_from_u64(seed);
        let map = LakeMap::generate(self.config.size as usize, self.config.p, &mut map_rng).ok_or_else(|| {
            EnvError::Other(format!(
                "no map with a reachable goal in {MAX_MAP_ATTEMPTS} draws for seed {seed} (p = {})",
                self.config.p
            ))
        })?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(1);
        let player = map.start;
        let observation = observe(&map, player, &self.config);
        let holes = map.cells.iter().filter(|&&c| c == Cell::Hole).count();
        self.episode = Some(Episode {
            map,
            player,
            rng,
            steps: 0,
            done: false,
            turn_start: player,
            plan: None,
            turn_values: TurnValues::new(),
        });
        Ok(ResetResult {
            observation,
            info: vec![Metric::new("num_holes", holes as f64)],
        })
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let mut episode = self
            .episode
            .take()
            .ok_or_else(|| EnvError::NotReady("step called before reset".to_string()))?;
        if episode.done {
            self.episode = Some(episode);
            return Err(EnvError::NotReady(
                "the episode has ended; call reset".to_string(),
            ));
        }
        let action = action.trim();
        let Some(intended) = ACTION_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(action))
        else {
            let observation = observe(&episode.map, episode.player, &self.config);
            self.episode = Some(episode);
            return Ok(StepResult {
                observation,
                reward: 0.0,
                terminated: false,
                truncated: false,
                action_is_valid: false,
                action_is_effective: false,
                success: false,
                info: vec![Metric::new("slipped", 0.0)],
            });
        };
        let taken = self.sample_direction(intended, &mut episode.rng);
        let from = episode.player;
        episode.player = episode.map.neighbour(from, taken);
        let cell = episode.map.cells[episode.player];
        let success = cell == Cell::Goal;
        let terminated = cell != Cell::Frozen;
        episode.steps += 1;
        let k = self.config.expert_moves_per_turn;
        if k > 0 && episode.steps % k == 0 {
            episode.turn_start = episode.player;
        }
        let max_steps = self.config.max_steps;
        let truncated = !terminated && max_steps > 0 && episode.steps >= max_steps;
        episode.done = terminated || truncated;
        let result = StepResult {
            observation: observe(&episode.map, episode.player, &self.config),
            reward: if success { 1.0 } else { 0.0 },
            terminated,
            truncated,
            action_is_valid: true,
            action_is_effective: episode.player != from,
            success,
            info: vec![Metric::new(
                "slipped",
                f64::from(u8::from(taken != intended)),
            )],
        };
        self.episode = Some(episode);
        Ok(result)
    }

    fn expert_info(config: &FrozenLakeConfig) -> Option<ExpertInfo> {
        Some(match config.expert {
            ExpertKind::Optimal if config.expert_moves_per_turn > 0 => ExpertInfo {
                description: format!(
                    "the next move of a plan of {} moves made when the turn began, maximising \
                     the probability of reaching the goal for an agent that sees the board only \
                     then (backward induction over turns of the slip model)",
                    config.expert_moves_per_turn
                ),
                optimal: true,
            },
            ExpertKind::Optimal => ExpertInfo {
                description: "an action maximising the probability of reaching the goal in the \
                              steps left (value iteration over the slip model)"
                    .into(),
                optimal: true,
            },
            ExpertKind::Greedy => ExpertInfo {
                description: "the next move of a shortest hole-free path to the goal, ignoring \
                              slips (greedy)"
                    .into(),
                optimal: false,
            },
        })
    }

    fn expert(&mut self) -> Result<Advice, EnvError> {
        self.advise()
    }
}

/// The steps an episode may take: the spec's action budget, or `max_steps` when smaller.
fn step_budget(config: &FrozenLakeConfig) -> u32 {
    match config.max_steps {
        0 => MAX_EPISODE_STEPS,
        m => m.min(MAX_EPISODE_STEPS),
    }
}

impl FrozenLake {
    /// The expert of `config` (`expert` key) from the current state: its actions and the
    /// probability that following it reaches the goal within the steps left.
    fn advise(&mut self) -> Result<Advice, EnvError> {
        let c = &self.config;
        let episode = match &mut self.episode {
            Some(e) if !e.done => e,
            _ => return Err(EnvError::NotReady("no episode running; call reset".into())),
        };
        if c.expert_moves_per_turn > 0 {
            return Ok(advise_turn(c, episode));
        }
        let left = step_budget(c).saturating_sub(episode.steps);
        let choose = match c.expert {
            ExpertKind::Optimal => expert::optimal,
            ExpertKind::Greedy => expert::greedy,
        };
        let choice = choose(
            &episode.map,
            episode.player,
            left,
            c.is_slippery,
            c.success_rate,
        );
        Ok(Advice {
            actions: choice
                .actions
                .iter()
                .map(|&a| ACTION_NAMES[a].to_string())
                .collect(),
            success_probability: Some(choice.success_probability),
        })
    }
}

/// The turn-planning expert (`expert_moves_per_turn` = `k` > 0): the next move of the plan
/// made when the current turn began (`crate::turn_plan`), whatever slips happened since, and
/// the probability that finishing the turn so and planning later turns alike reaches the goal.
/// With no planned move left (no step left), all four directions are listed, worth 0.
fn advise_turn(c: &FrozenLakeConfig, episode: &mut Episode) -> Advice {
    let k = c.expert_moves_per_turn;
    let budget = step_budget(c);
    let began = episode.steps - episode.steps % k;
    let mut planner = TurnPlanner::new(
        &episode.map,
        k,
        c.is_slippery,
        c.success_rate,
        &mut episode.turn_values,
    );
    if episode.plan.as_ref().is_none_or(|(at, _)| *at != began) {
        let plan = planner.plan(episode.turn_start, budget.saturating_sub(began));
        episode.plan = Some((began, plan));
    }
    let (_, plan) = episode.plan.as_ref().expect("planned above");
    let rest = plan
        .actions
        .get((episode.steps - began) as usize..)
        .unwrap_or_default();
    let Some(&next) = rest.first() else {
        return Advice {
            actions: ACTION_NAMES.iter().map(|n| n.to_string()).collect(),
            success_probability: Some(0.0),
        };
    };
    let p = planner.value_of(episode.player, budget.saturating_sub(episode.steps), rest);
    Advice {
        actions: vec![ACTION_NAMES[next].to_string()],
        success_probability: Some(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::adapter;

    fn env_on(cells: &str, start: usize, slippery: bool) -> FrozenLake {
        let map = crate::map::test_map(cells, start);
        let config = FrozenLakeConfig {
            is_slippery: slippery,
            ..FrozenLakeConfig::default()
        };
        let mut env = FrozenLake::with_config(config);
        let rng = ChaCha8Rng::seed_from_u64(0);
        env.episode = Some(Episode {
            player: start,
            map,
            rng,
            steps: 0,
            done: false,
            turn_start: start,
            plan: None,
            turn_values: TurnValues::new(),
        });
        env
    }

    #[test]
    fn the_turn_expert_keeps_its_plan_through_slips() {
        // Player on 14, goal 15 to its right, two steps in one turn of two moves: the plan is
        // Down, Down, worth 4/9 (`turn_plan::tests`, by hand). After the first move, wherever
        // it slipped, the advice is the plan's second move, worth 1/3 from 14 (a second Down
        // slips right onto the goal) and 0 from 13; seeds reach both cells.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let mut env = env_on("FFFF FFFF FFFF FFFG", 14, true);
            env.config.max_steps = 2;
            env.config.expert_moves_per_turn = 2;
            env.episode.as_mut().unwrap().rng = ChaCha8Rng::seed_from_u64(seed);
            let first = env.expert().unwrap();
            assert_eq!(first.actions, vec!["Down"]);
            assert!((first.success_probability.unwrap() - 4.0 / 9.0).abs() < 1e-12);
            if env.step("Down").unwrap().terminated {
                seen.insert(15);
                continue;
            }
            let (_, player) = env.state().unwrap();
            let second = env.expert().unwrap();
            assert_eq!(second.actions, vec!["Down"], "seed {seed}, on {player}");
            let want = if player == 14 { 1.0 / 3.0 } else { 0.0 };
            assert!(player == 14 || player == 13, "seed {seed}: {player}");
            assert!((second.success_probability.unwrap() - want).abs() < 1e-12);
            seen.insert(player);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![13, 14, 15]);
    }

    #[test]
    fn a_new_turn_replans_from_where_the_player_stands() {
        // Deterministic ice, open board, player 0, goal 15, turns of 2 moves: each turn's
        // plan starts from the cell the last turn ended on, and following it walks a shortest
        // path (6 moves) to the goal.
        let mut env = env_on("FFFF FFFF FFFF FFFG", 0, false);
        env.config.expert_moves_per_turn = 2;
        let mut moves = 0;
        loop {
            let advice = env.expert().unwrap();
            assert_eq!(advice.success_probability, Some(1.0));
            moves += 1;
            if env.step(&advice.actions[0]).unwrap().terminated {
                break;
            }
            if moves % 2 == 0 {
                let (_, player) = env.state().unwrap();
                assert_eq!(env.episode.as_ref().unwrap().turn_start, player);
            }
        }
        assert_eq!(moves, 6);
        assert_eq!(env.state().unwrap().1, 15);
    }

    #[test]
    fn hole_ends_the_episode_without_reward() {
        let mut env = env_on("FHFF FFFF FFFF FFFG", 0, false);
        let r = env.step("Right").unwrap();
        assert!(r.terminated && !r.truncated && !r.success);
        assert_eq!(r.reward, 0.0);
        assert_eq!(r.observation, "_X__\n____\n____\n___G");
        assert!(matches!(env.step("Down"), Err(EnvError::NotReady(_))));
    }

    #[test]
    fn goal_pays_one_and_ends_the_episode() {
        let mut env = env_on("FFFF FFFF FFFF FFFG", 14, false);
        let r = env.step("right").unwrap();
        assert!(r.terminated && r.success && r.action_is_effective);
        assert_eq!(r.reward, 1.0);
        assert_eq!(r.observation, "____\n____\n____\n___\u{221a}");
    }

    #[test]
    fn moving_into_the_edge_is_not_effective() {
        let mut env = env_on("FFFF FFFF FFFF FFFG", 0, false);
        let r = env.step("Up").unwrap();
        assert!(r.action_is_valid && !r.action_is_effective && !r.terminated);
        assert_eq!(r.observation, "P___\n____\n____\n___G");
        let r = env.step("Fly").unwrap();
        assert!(!r.action_is_valid && r.reward == 0.0);
    }

    #[test]
    fn max_steps_truncates_an_episode_that_has_not_ended() {
        let mut env = env_on("FFFF FFFF FFFF FFFG", 0, false);
        env.config.max_steps = 3;
        let r: Vec<StepResult> = ["Up", "Left", "Up"]
            .iter()
            .map(|a| env.step(a).unwrap())
            .collect();
        assert!(!r[1].truncated && !r[1].terminated);
        assert!(r[2].truncated && !r[2].terminated && !r[2].success);
        assert!(matches!(env.step("Down"), Err(EnvError::NotReady(_))));
        // the goal on the last allowed step is a success, not a truncation
        let mut env = env_on("FFFF FFFF FFFF FFFG", 13, false);
        env.config.max_steps = 2;
        env.step("Right").unwrap();
        let r = env.step("Right").unwrap();
        assert!(r.success && r.terminated && !r.truncated);
    }

    #[test]
    fn the_answer_example_is_optional_and_coordinates_are_explained() {
        let with = adapter::spec::<FrozenLake>("").unwrap().instruction;
        assert!(
            with.ends_with("for example <answer>Down || Right</answer>."),
            "{with}"
        );
        let without = adapter::spec::<FrozenLake>(r#"{"answer_example":false}"#).unwrap();
        assert!(
            without
                .instruction
                .ends_with("Answer with a list of moves.")
        );
        let coord = adapter::spec::<FrozenLake>(r#"{"observation_format":"grid_coord"}"#).unwrap();
        assert!(coord.instruction.ends_with("Right column + 1."));
        // the coordinates follow the player: Right from (0, 0) on a dry map is (0, 1)
        let mut env = env_on("FFFF FFFF FFFF FFFG", 0, false);
        env.config.observation_format = ObservationFormat::GridCoord;
        let r = env.step("Right").unwrap();
        assert!(
            r.observation
                .contains("\nPlayer: (0, 1)\nGoal: (3, 3)\nGrid:\n_P__\n"),
            "{}",
            r.observation
        );
    }

    #[test]
    fn slip_frequencies_match_one_third_each() {
        // 30 000 slippery "Down" steps from the centre of an all-frozen map. Each outcome has
        // p = 1/3: mean 10 000, sd sqrt(30000 * 1/3 * 2/3) = 81.6; allow 5 sd.
        let mut env = env_on("FFFF FFFF FFFF FFFG", 5, true);
        let mut counts = [0usize; 4];
        let n = 30_000;
        for _ in 0..n {
            let episode = env.episode.as_mut().unwrap();
            episode.player = 5;
            let r = env.step("Down").unwrap();
            let to = env.episode.as_ref().unwrap().player;
            let dir = [4, 9, 6, 1].iter().position(|&p| p == to).unwrap();
            counts[dir] += 1;
            assert_eq!(r.info[0].value == 1.0, dir != 1);
        }
        assert_eq!(counts[3], 0, "up is never a slip of down");
        for dir in [0, 1, 2] {
            assert!(
                (counts[dir] as f64 - 10_000.0).abs() < 5.0 * 81.65,
                "{counts:?}"
            );
        }
    }

    #[test]
    fn success_rate_is_configurable() {
        let mut env = env_on("FFFF FFFF FFFF FFFG", 5, true);
        env.config.success_rate = 0.8;
        let n = 20_000;
        let mut intended = 0usize;
        for _ in 0..n {
            env.episode.as_mut().unwrap().player = 5;
            env.step("Right").unwrap();
            intended += usize::from(env.episode.as_ref().unwrap().player == 6);
        }
        // Binomial(20000, 0.8): sd 56.6.
        assert!(
            (intended as f64 - 16_000.0).abs() < 5.0 * 56.6,
            "{intended}"
        );
    }

    #[test]
    fn reset_renders_the_start_and_same_seed_same_map() {
        let mut env = adapter::create::<FrozenLake>("").unwrap();
        let a = env.reset(9).unwrap().observation;
        assert_eq!(a, env.reset(9).unwrap().observation);
        assert_eq!(a.matches('P').count(), 1);
        assert_eq!(a.matches('G').count(), 1);
        assert_eq!(a.lines().count(), 4);
        let maps: std::collections::HashSet<String> =
            (0..50).map(|s| env.reset(s).unwrap().observation).collect();
        assert!(maps.len() > 40);
    }

    #[test]
    fn spec_lists_ragen_actions_and_symbols() {
        let spec = adapter::spec::<FrozenLake>("").unwrap();
        assert_eq!(spec.id, "ragen/FrozenLake-v0");
        assert_eq!(spec.action_names.unwrap(), ["Left", "Down", "Right", "Up"]);
        assert_eq!(spec.max_episode_steps, 10);
        let symbols: String = spec
            .symbol_legend
            .unwrap()
            .iter()
            .map(|s| s.symbol.clone())
            .collect();
        assert_eq!(symbols, "P_OGX\u{221a}");
        assert_eq!(
            adapter::config::<FrozenLake>(&spec.default_config).unwrap(),
            FrozenLakeConfig::default()
        );
    }

    proptest::proptest! {
        #[test]
        fn same_seed_and_actions_give_the_same_episode(seed in 0u64..1_000_000, actions in proptest::collection::vec(0usize..5, 0..12)) {
            let names = ["Left", "Down", "Right", "Up", "Stay"];
            let run = || {
                let mut env = adapter::create::<FrozenLake>("").unwrap();
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
