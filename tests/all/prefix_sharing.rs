//! Prefix sharing in the trainer's rollouts (`docs/ragen-semantics.md`, "Prefix sharing in
//! rollouts"): two training iterations of a tiny random model (the default model's vocabulary) on a
//! three-turn env, with `rollout.prefix_sharing` on and off, give the same metrics (the same
//! sampled tokens, so the same rewards, losses and gradient norms), while with sharing on only a
//! fraction of the prompt tokens is prefilled.

use ragen_gym_core::{Env, EnvCallError, EnvSpec, ResetResult, StepResult};
use ragen_gym_policy as pol;
use ragen_gym_starpo::policy_adapter::{PolicyGenerator, PrefixSharing};
use ragen_gym_starpo::seeds::group_seeds;
use ragen_gym_starpo::{
    Config, ConfigBuilder, EnvFactory, EnvPool, Metrics, RolloutParams, Silent, TrainSetup,
    Trainer, rollout,
};
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

/// The test config with prefix sharing `on` and the model at `model`.
fn echo_config(model: &Path, on: bool) -> Config {
    ConfigBuilder::new()
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
        .unwrap()
}

/// Two iterations' metrics with prefix sharing `on`.
fn two_iterations(model: &Path, run_dir: &Path, on: bool) -> Vec<Metrics> {
    echo_iterations(echo_config(model, on), run_dir, 2)
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

/// The sharing metrics of one training rollout of `model` (the trainer's generator and its one
/// decision, [`PrefixSharing::decide`]) with `rollout.prefix_sharing` on.
fn sharing_metrics(config: &Config, model: pol::LlamaModel, tok: &pol::Tokenizer) -> Metrics {
    let sharing = PrefixSharing::decide(config, &model);
    let mut generator = PolicyGenerator::new(model, tok, None, sharing);
    let g = config.es_manager.train;
    let make_env: EnvFactory = Box::new(|| Ok(Echo::boxed()));
    let mut pool = EnvPool::from_factory(&make_env, g.env_groups * g.group_size).unwrap();
    let p = RolloutParams::from_config(config, pool.spec(), 1.0, 3);
    let seeds = group_seeds(config.seed.train, g.env_groups, g.group_size);
    let trajs = rollout(&mut pool, &seeds, &mut generator, &p, &mut |_| {}).unwrap();
    assert_eq!(trajs.len(), 12);
    generator.prefix_sharing_metrics()
}

/// A GPU-shaped model (bf16 compute, what CUDA computes in, here on the CPU) cannot share
/// prefixes: with sharing asked for, the run samples without it and reports no sharing metrics
/// (not a `prefilled_token_frac` of 0 and a cache of 0 MiB), while the CPU f32 model shares.
#[test]
fn a_model_that_cannot_share_prefixes_reports_no_sharing_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::learning::tiny_model(&dir.path().join("model"), 7);
    let config = echo_config(&path, true);
    let loaded = pol::load_on(&path, &pol::Device::Cpu).unwrap();
    let cpu = loaded.frozen_model().unwrap();
    let gpu_like = cpu.with_compute_dtype(pol::DType::BF16);
    assert_eq!(
        PrefixSharing::decide(&config, &gpu_like),
        PrefixSharing::Off
    );
    assert!(sharing_metrics(&config, gpu_like, &loaded.tokenizer).is_empty());
    let shared = sharing_metrics(&config, cpu, &loaded.tokenizer);
    let frac = shared["rollout/prefilled_token_frac"];
    assert!(
        frac > 0.0 && frac < 0.6,
        "{frac} of prompt tokens prefilled"
    );
    assert!(shared["rollout/prefix_cache_peak_mib"] > 0.0);
    let off = echo_config(&path, false);
    assert_eq!(
        PrefixSharing::decide(&off, &loaded.frozen_model().unwrap()),
        PrefixSharing::Off
    );
}
