//! Prefix sharing in the trainer's rollouts (`docs/benchmarks.md`, "`bench iteration`"): two
//! training iterations of a tiny random model (the default model's vocabulary) on a three-turn env,
//! with `rollout.prefix_sharing` on and off, give the same metrics (the same sampled tokens, so the
//! same rewards, losses and gradient norms), while with sharing on only a fraction of the prompt
//! tokens is prefilled.

use ragen_gym_core::{Env, EnvCallError, EnvSpec, ResetResult, StepResult};
use ragen_gym_policy as pol;
use ragen_gym_starpo::{Config, ConfigBuilder, Metrics, Silent, TrainSetup, Trainer};
use std::path::Path;

/// Three turns; the observation names the reset seed and echoes the action, the reward is the
/// action's length modulo 2 (so groups differ and advantages are not all zero).
pub(crate) struct Echo {
    spec: EnvSpec,
    seed: u64,
    turn: u32,
}

impl Echo {
    pub(crate) fn boxed() -> Box<dyn Env> {
        Box::new(Self {
            spec: EnvSpec {
                id: "test/Echo-v0".into(),
                version: "0.1.0".into(),
                description: "echoes the action for three turns".into(),
                instruction: "Say Up or Down.".into(),
                action_names: Some(vec!["Up".into(), "Down".into()]),
                symbol_legend: None,
                max_episode_steps: 3,
                reward_threshold: None,
                default_config: "{}".into(),
            },
            seed: 0,
            turn: 0,
        })
    }
}

impl Env for Echo {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.seed = seed;
        self.turn = 0;
        Ok(ResetResult {
            observation: format!("Room {} of the echo house. ###..#", seed % 7),
            info: vec![],
        })
    }
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        self.turn += 1;
        Ok(StepResult {
            observation: format!("You said {action} in room {}.", self.seed % 7),
            reward: (action.len() % 2) as f64,
            terminated: self.turn >= 3,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: action == "Up",
            info: vec![],
        })
    }
}

/// Two iterations' metrics with prefix sharing `on`.
fn two_iterations(model: &Path, run_dir: &Path, on: bool) -> Vec<Metrics> {
    let config = ConfigBuilder::new()
        .layer_str(
            "[trainer]\ntotal_training_steps = 2\nsave_freq = -1\nlog_trajectories = 0\n\
             [es_manager.train]\nenv_groups = 3\ngroup_size = 4\n\
             [es_manager.val]\nenv_groups = 1\ngroup_size = 1\n\
             [agent_proxy]\nmax_turn = 3\n\
             [rollout]\nresponse_length = 12\ngeneration_batch_size = 5\nrollout_filter_ratio = 1.0\n\
             [actor]\nactor_lr = 1e-3\nppo_mini_batch_size = 12\nmicro_batch_size = 4\n\
             [critic]\ncritic_lr = 1e-3\n\
             [model]\nlora_rank = 0\n",
            "the prefix-sharing test config",
        )
        .unwrap()
        .layer_override(&format!("rollout.prefix_sharing={on}"))
        .unwrap()
        .set_str("model.path", &model.display().to_string(), "the test")
        .unwrap()
        .build()
        .unwrap();
    echo_iterations(config, run_dir, 2)
}

/// The metrics of `n` iterations of a fresh trainer on `config` with the [`Echo`] env.
pub(crate) fn echo_iterations(config: Config, run_dir: &Path, n: usize) -> Vec<Metrics> {
    let mut t = Trainer::new(TrainSetup {
        config,
        make_env: Box::new(|| Ok(Echo::boxed())),
        plugin_sha256: "native".into(),
        env_source: "echo".into(),
        reward_functions: vec![],
        run_dir: run_dir.to_path_buf(),
        resume: false,
        device: pol::Device::Cpu,
    })
    .unwrap();
    (0..n).map(|_| t.iterate(&mut Silent).unwrap()).collect()
}

#[test]
fn rollouts_with_prefix_sharing_train_like_rollouts_without() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    crate::learning::tiny_model(&model, 7);
    let on = two_iterations(&model, &dir.path().join("on"), true);
    let off = two_iterations(&model, &dir.path().join("off"), false);
    for (it, (a, b)) in on.iter().zip(&off).enumerate() {
        // With sharing, each group's first prompt is prefilled once and each later turn only
        // adds the response, the observation and the template.
        let frac = a["rollout/prefilled_token_frac"];
        assert!(
            frac < 0.6,
            "iteration {it}: {frac} of prompt tokens prefilled"
        );
        assert!(!b.contains_key("rollout/prefilled_token_frac"));
        assert!(a["rollout/old_log_prob"].is_finite());
        let own = |k: &str| k.starts_with("timing_s/") || k.starts_with("rollout/prefi");
        let keys_a: Vec<&String> = a.keys().filter(|k| !own(k)).collect();
        let keys_b: Vec<&String> = b.keys().filter(|k| !own(k)).collect();
        assert_eq!(keys_a, keys_b, "iteration {it}");
        for k in keys_a {
            let (x, y) = (a[k], b[k]);
            let same = (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * y.abs().max(1.0);
            assert!(same, "iteration {it}: {k} is {x} with sharing, {y} without");
        }
    }
}
