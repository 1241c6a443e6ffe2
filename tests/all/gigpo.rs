//! GiGPO (`algorithm.adv_estimator = "gigpo"`, `ragen_gym_starpo::gigpo`) through the real
//! trainer: a tiny random model (`learning::tiny_model`) learns a two-turn corridor, and every
//! iteration's step groups are the anchor states the corridor shares.
//!
//! The corridor: from `Start.` either move leads to `Hall.`, and from there the episode ends;
//! `Right` pays 1 and `Left` 0 at both steps; success is `Right` twice (random policy 0.25). All
//! members of an env group see `Start.` at turn 1 and `Hall.` at turn 2, so each env group of 4
//! forms two step groups of 4, and the step advantage rates each turn's move on its own.

use crate::learning::{learning_config, tiny_model, train};
use ragen_gym_core::{Env, EnvCallError, EnvSpec, ResetResult, StepResult};
use ragen_gym_policy as pol;
use ragen_gym_starpo::{TrainSetup, Trainer};

struct Corridor {
    spec: EnvSpec,
    steps: u32,
    rights: u32,
}

impl Corridor {
    fn boxed() -> Box<dyn Env> {
        Box::new(Self {
            spec: EnvSpec {
                id: "test/Corridor-v0".into(),
                version: "0.1.0".into(),
                description: "two moves, Right pays at each".into(),
                instruction: "Move Left or Right, twice.".into(),
                action_names: Some(vec!["Left".into(), "Right".into()]),
                symbol_legend: None,
                max_episode_steps: 2,
                reward_threshold: None,
                default_config: "{}".into(),
            },
            steps: 0,
            rights: 0,
        })
    }
}

impl Env for Corridor {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _seed: u64) -> Result<ResetResult, EnvCallError> {
        (self.steps, self.rights) = (0, 0);
        Ok(ResetResult {
            observation: "Start.".into(),
            info: vec![],
        })
    }
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        let right = action == "Right";
        self.steps += 1;
        self.rights += u32::from(right);
        let done = self.steps == 2;
        Ok(StepResult {
            observation: if done { "End." } else { "Hall." }.into(),
            reward: if right { 1.0 } else { 0.0 },
            terminated: done,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: done && self.rights == 2,
            info: vec![],
        })
    }
}

fn corridor_trainer(config: ragen_gym_starpo::Config, dir: &std::path::Path) -> Trainer {
    Trainer::new(TrainSetup {
        config,
        make_env: Box::new(|| Ok(Corridor::boxed())),
        plugin_sha256: "native".into(),
        env_source: "corridor".into(),
        reward_functions: vec![],
        run_dir: dir.join("run"),
        resume: false,
        device: pol::Device::Cpu,
    })
    .unwrap()
}

/// GiGPO on the corridor: two one-action turns, `mean` normalisation.
const GIGPO_CORRIDOR: &str = "[algorithm]\nadv_estimator = \"gigpo\"\n\
     [agent_proxy]\nmax_turn = 2\nmax_actions_per_traj = 2\n\
     [agent_proxy.reward_normalization]\nmethod = \"mean\"\n";

/// GiGPO with the learnability settings, two one-action turns, 16 iterations; validation on 32
/// episodes every 4. About 15 s on this project's 2-core machine (contended).
#[test]
fn a_tiny_model_learns_a_two_turn_corridor_with_gigpo() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 7);
    let t0 = std::time::Instant::now();
    let config = learning_config(&model, GIGPO_CORRIDOR);
    let mut t = corridor_trainer(config, dir.path());
    let metrics = train(&mut t);
    let curve: Vec<(u32, f64)> = metrics
        .iter()
        .filter_map(|(i, m)| m.get("val-env/Corridor/success").map(|s| (*i, *s)))
        .collect();
    eprintln!(
        "gigpo corridor: validation success {curve:?} in {:?}",
        t0.elapsed()
    );
    let (first, last) = (curve[0].1, curve[curve.len() - 1].1);
    assert!(
        first <= 0.5,
        "the untrained model is near random (0.25): {curve:?}"
    );
    assert!(last >= 0.9, "success must reach 0.9: {curve:?}");
    for (i, m) in metrics.iter().filter(|(i, _)| **i > 0) {
        // 4 env groups of 4, two turns each, all kept: 8 step groups of 4 members
        assert_eq!(m["gigpo/step_group_size/mean"], 4.0, "iteration {i}");
        assert_eq!(m["gigpo/step_group_size/min"], 4.0, "iteration {i}");
    }
}

/// Tree-shaped rollouts (`rollout.branch`) through the real trainer: after turn 1 of every
/// trajectory two continuations are forked from `Hall.`, so each env group of 4 has 12
/// trajectories. GiGPO's step groups are then `Start.` with the group's 4 own first turns (the
/// branches' copies of them are trained by their parents only) and `Hall.` with 4 + 8 second
/// turns. 4 iterations, validation before and after.
#[test]
fn gigpo_trains_on_branches_forked_after_the_first_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 7);
    let config = learning_config(
        &model,
        &format!(
            "{GIGPO_CORRIDOR}[rollout.branch]\nafter_turns = [1]\ncount = 2\n\
             [trainer]\ntotal_training_steps = 4\n"
        ),
    );
    let mut t = corridor_trainer(config, dir.path());
    let metrics = train(&mut t);
    let mut iterations = 0;
    for (i, m) in metrics.iter().filter(|(i, _)| **i > 0) {
        iterations += 1;
        assert_eq!(m["rollout/branches"], 32.0, "iteration {i}");
        // every trajectory has a sample: 16 of the groups' own and 32 branches
        assert_eq!(m["rollout/kept_trajectories"], 48.0, "iteration {i}");
        assert_eq!(m["gigpo/step_group_size/min"], 4.0, "iteration {i}");
        assert_eq!(m["gigpo/step_group_size/max"], 12.0, "iteration {i}");
        assert_eq!(m["gigpo/step_group_size/mean"], 8.0, "iteration {i}");
        assert!(m["actor/pg_loss"].is_finite(), "iteration {i}");
        // the branches' prompts start with their parents': the prefix cache serves them
        eprintln!(
            "branches, iteration {i}: rollout/prefilled_token_frac {:?}, branch success {}",
            m.get("rollout/prefilled_token_frac"),
            m["rollout/branch_success"]
        );
    }
    assert_eq!(iterations, 4);
}
