//! The trainer learns (`docs/ragen-semantics.md` §1): a tiny random-initialised model (2 layers,
//! hidden 32, the default model's vocabulary) trained through the real `Trainer` on a two-armed
//! bandit, with GAE and with GRPO; one update moves a sample's log-prob in the direction of its
//! advantage by the amount AdamW's first step predicts (full fine-tuning and LoRA); GAE through the
//! trainer's estimate stage with a constant critic; and a resumed run repeats the uninterrupted
//! one.
//!
//! The tiny model uses the default model's tokenizer (installed by `scripts/setup.sh`), so
//! constrained decoding runs on a real byte-level BPE vocabulary.

use ragen_gym_core::{Env, EnvCallError, EnvSpec, ResetResult, StepResult};
use ragen_gym_policy as pol;
use ragen_gym_starpo::advantages::{Estimates, Scorers, ScoringPasses, Source, Sources, estimate};
use ragen_gym_starpo::batch::TrainSample;
use ragen_gym_starpo::batch::tensors::{rows_of, token_batch};
use ragen_gym_starpo::update::{UpdateModels, update};
use ragen_gym_starpo::{Config, ConfigBuilder, Metrics, TrainEvent, TrainSetup, Trainer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Two arms: `Right` pays 1 and succeeds, `Left` pays 0 and fails; one pull ends the episode.
struct TwoArms {
    spec: EnvSpec,
}

impl TwoArms {
    fn boxed() -> Box<dyn Env> {
        Self::with_names(Some(vec!["Left".into(), "Right".into()]))
    }

    fn with_names(action_names: Option<Vec<String>>) -> Box<dyn Env> {
        Box::new(Self {
            spec: EnvSpec {
                id: "test/TwoArms-v0".into(),
                version: "0.1.0".into(),
                description: "a two-armed bandit with a sure winner".into(),
                instruction: "Pull one of two arms, Left or Right.".into(),
                action_names,
                symbol_legend: None,
                max_episode_steps: 1,
                reward_threshold: None,
                default_config: "{}".into(),
            },
        })
    }
}

impl Env for TwoArms {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _seed: u64) -> Result<ResetResult, EnvCallError> {
        Ok(ResetResult {
            observation: "Two arms.".into(),
            info: vec![],
        })
    }
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        let right = action == "Right";
        Ok(StepResult {
            observation: format!("You pulled {action}."),
            reward: if right { 1.0 } else { 0.0 },
            terminated: true,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: right,
            info: vec![],
        })
    }
}

fn default_tokenizer() -> pol::Tokenizer {
    let path = pol::default_model_path();
    assert!(
        path.exists(),
        "default model missing at {} (run scripts/setup.sh)",
        path.display()
    );
    pol::load_tokenizer(&path).unwrap()
}

/// A tiny random Llama (2 layers, hidden 32, 4 heads) over the default vocabulary, written as
/// a Hugging Face directory `dir`.
pub(crate) fn tiny_model(dir: &Path, seed: u64) -> PathBuf {
    let tokenizer = default_tokenizer();
    let config = pol::ModelConfig::tiny(tokenizer.vocab_size());
    let weights = pol::random_weights(&config, seed, &pol::Device::Cpu).unwrap();
    let loaded = pol::LoadedModel {
        config,
        weights,
        tokenizer,
        source: dir.to_path_buf(),
    };
    std::fs::create_dir_all(dir).unwrap();
    pol::Policy::new(&loaded, pol::Trainable::Full, 0)
        .unwrap()
        .save_pretrained(dir)
        .unwrap();
    dir.to_path_buf()
}

/// The learnability settings: one-turn episodes, thinking off, constrained decoding, 4 groups of
/// 4 per iteration, no filter, one optimiser step per iteration, full fine-tuning at a tiny
/// model's learning rate, validation on 32 episodes every 4 iterations.
pub(crate) fn learning_config(model: &Path, extra: &str) -> Config {
    ConfigBuilder::new()
        .layer_str(
            "[trainer]\ntotal_training_steps = 16\ntest_freq = 4\nsave_freq = -1\nlog_trajectories = 0\n\
             [seed]\nsampler = 1\n\
             [es_manager.train]\nenv_groups = 4\ngroup_size = 4\n\
             [es_manager.val]\nenv_groups = 32\ngroup_size = 1\n\
             [agent_proxy]\nmax_turn = 1\nmax_actions_per_turn = 1\nmax_actions_per_traj = 1\nenable_think = false\n\
             [rollout]\nresponse_length = 8\nconstrained_actions = true\nrollout_filter_ratio = 1.0\n\
             [actor]\nactor_lr = 1e-2\nppo_mini_batch_size = 16\nmicro_batch_size = 16\nkl_after_update_freq = 1\n\
             [critic]\ncritic_lr = 1e-2\n\
             [model]\nlora_rank = 0\n",
            "the learnability config",
        )
        .unwrap()
        .layer_str(extra, "the test's settings")
        .unwrap()
        .set_str("model.path", &model.display().to_string(), "the test")
        .unwrap()
        .build()
        .unwrap()
}

fn trainer(config: Config, run_dir: &Path, resume: bool) -> Trainer {
    Trainer::new(TrainSetup {
        config,
        make_env: Box::new(|| Ok(TwoArms::boxed())),
        plugin_sha256: "native".into(),
        env_source: "two-arms".into(),
        reward_functions: vec![],
        run_dir: run_dir.to_path_buf(),
        resume,
        device: pol::Device::Cpu,
    })
    .unwrap()
}

/// Train and return every iteration's metrics.
pub(crate) fn train(t: &mut Trainer) -> BTreeMap<u32, Metrics> {
    let mut all = BTreeMap::new();
    t.train(&mut |e: &TrainEvent<'_>| {
        if let TrainEvent::Metrics { iteration, metrics } = e {
            all.insert(*iteration, (*metrics).clone());
        }
        Ok(())
    })
    .unwrap();
    all
}

fn val_curve(metrics: &BTreeMap<u32, Metrics>) -> Vec<(u32, f64)> {
    metrics
        .iter()
        .filter_map(|(i, m)| m.get("val-env/TwoArms/success").map(|s| (*i, *s)))
        .collect()
}

const GAE: &str = "[algorithm]\nadv_estimator = \"gae\"\n";
/// RAGEN's GRPO runs (train_all.sh): group-normalised scores, no critic.
const GRPO: &str = "[algorithm]\nadv_estimator = \"grpo\"\n\
                    [agent_proxy.reward_normalization]\nmethod = \"mean_std\"\n";

/// Train a fresh tiny model (weights from `seed`, sampler seed `seed`) and check that
/// validation success goes from about 0.5 to at least 0.9.
fn learns(extra: &str, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), seed);
    let t0 = std::time::Instant::now();
    let cfg = learning_config(&model, &format!("{extra}[seed]\nsampler = {seed}\n"));
    let mut t = trainer(cfg, &dir.path().join("run"), false);
    let metrics = train(&mut t);
    let curve = val_curve(&metrics);
    eprintln!(
        "{extra:?} seed {seed}: validation success {curve:?} in {:?}",
        t0.elapsed()
    );
    let (first, last) = (curve[0].1, curve[curve.len() - 1].1);
    assert!(
        (0.25..=0.75).contains(&first),
        "the untrained model picks either arm: {curve:?}"
    );
    assert!(last >= 0.9, "success must reach 0.9: {curve:?}");
    // every sampled answer parsed (constrained decoding) and the policy moved each update
    for (i, m) in metrics.iter().filter(|(i, _)| **i > 0) {
        assert_eq!(m["train/TwoArms/action_is_valid"], 1.0, "iteration {i}");
        assert!(m["actor/kl_after_update"] > 0.0, "iteration {i}: {m:?}");
        assert!(m["rollout/constrained_token_frac"] > 0.0);
        // on-policy: the trainer's old log-probs are the sampler's (same tokens, same mask)
        assert!(
            m["training/rollout_probs_diff_max"] < 1e-4,
            "iteration {i}: {m:?}"
        );
    }
}

#[test]
fn a_tiny_model_learns_the_two_armed_bandit_with_gae() {
    learns(GAE, 7);
}

#[test]
fn a_tiny_model_learns_the_two_armed_bandit_with_grpo() {
    learns(GRPO, 7);
}

#[test]
#[ignore = "the seed sweep behind the two learnability tests' margin: 2 x 8 runs, ~10 min of CPU"]
fn learnability_holds_across_seeds() {
    for seed in 1..=8 {
        learns(GAE, seed);
        learns(GRPO, seed);
    }
}

#[test]
fn constrained_decoding_needs_action_names() {
    // The option on an env whose actions are free text is a config error naming the env and
    // the key, raised when the run starts.
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 1);
    let setup = TrainSetup {
        config: learning_config(&model, GAE),
        make_env: Box::new(|| Ok(TwoArms::with_names(None))),
        plugin_sha256: "native".into(),
        env_source: "two-arms".into(),
        reward_functions: vec![],
        run_dir: dir.path().join("run"),
        resume: false,
        device: pol::Device::Cpu,
    };
    let Err(e) = Trainer::new(setup) else {
        panic!("a run without action names started with constrained decoding on");
    };
    assert!(
        matches!(e, ragen_gym_starpo::TrainError::Constraint(_)),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("rollout.constrained_actions") && msg.contains("test/TwoArms-v0"),
        "{msg}"
    );
}

/// An `sft` setup on the built-in Bandit (its expert plays the better arm) with the tiny model of
/// `cfg`: the config's learning rate, batches of 4, a fresh run in `run_dir`.
fn bandit_sft(
    cfg: &Config,
    run_dir: PathBuf,
    demonstrations: ragen_gym_starpo::Demonstrations,
    epochs: u32,
) -> ragen_gym_starpo::SftSetup {
    let bandit = ragen_gym_builtins::find("bandit").unwrap().native.unwrap();
    ragen_gym_starpo::SftSetup {
        lr: cfg.actor.actor_lr,
        config: cfg.clone(),
        make_env: Box::new(move || bandit("")),
        plugin_sha256: "native".into(),
        env_source: "bandit".into(),
        run_dir,
        device: pol::Device::Cpu,
        demonstrations,
        epochs,
        schedule: ragen_gym_starpo::SftSchedule::default(),
        val_every: 1,
        batch_size: 4,
        resume: false,
    }
}

/// `sft` refuses `rollout.constrained_min_actions` above 1, naming the key and why (an expert's
/// answer stops where its episode ends), before it writes a run directory.
#[test]
fn sft_refuses_a_minimum_number_of_actions() {
    use ragen_gym_starpo::{Demonstrations, SftTrainer};
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 3);
    let cfg = learning_config(
        &model,
        "[agent_proxy]\nmax_actions_per_turn = 2\nmax_actions_per_traj = 2\n\
         [rollout]\nconstrained_min_actions = 2\n",
    );
    let Err(e) = SftTrainer::new(bandit_sft(
        &cfg,
        dir.path().join("run"),
        Demonstrations::Collect(4),
        1,
    )) else {
        panic!("sft started with constrained_min_actions = 2");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("sft needs rollout.constrained_min_actions = 1, got 2"),
        "{msg}"
    );
    assert!(!dir.path().join("run").exists());
}

/// A tiny random model over the default vocabulary, in memory.
fn tiny_loaded(seed: u64) -> pol::LoadedModel {
    let tokenizer = default_tokenizer();
    let config = pol::ModelConfig::tiny(tokenizer.vocab_size());
    let weights = pol::random_weights(&config, seed, &pol::Device::Cpu).unwrap();
    pol::LoadedModel {
        config,
        weights,
        tokenizer,
        source: "tiny".into(),
    }
}

/// A one-turn training sequence whose assistant answer is trained (RAGEN's mask), with the
/// score `reward` on its last position.
fn sample(tok: &pol::Tokenizer, answer: &str, reward: f32) -> TrainSample {
    let ids = tok
        .encode_chat(
            &[
                pol::Message::user("Pull one of two arms, Left or Right."),
                pol::Message::assistant(answer),
            ],
            false,
        )
        .unwrap();
    let start = ids.len()
        - tok
            .encode_chat(&[pol::Message::assistant(answer)], false)
            .unwrap()
            .len();
    let l = ids.len();
    let loss_mask: Vec<f32> = (0..l - 1)
        .map(|j| if j >= start { 1.0 } else { 0.0 })
        .collect();
    let mut token_rewards = vec![0.0; l - 1];
    token_rewards[l - 2] = reward;
    TrainSample {
        input_ids: ids,
        loss_mask,
        token_rewards,
        choices: vec![],
        rollout_logp: vec![],
        group: 0,
        index: 0,
        turns: Vec::new(),
    }
}

/// Masked mean log-prob of `s` under `model`, as a tensor.
fn mean_logp(model: &pol::LlamaModel, s: &TrainSample, pad: u32) -> pol::Tensor {
    let batch = token_batch(&[s], pad).unwrap();
    let sc = pol::score(model, &batch).unwrap();
    ((sc.logprobs * &sc.mask).unwrap().sum_all().unwrap() / sc.mask.sum_all().unwrap()).unwrap()
}

fn scalar(t: &pol::Tensor) -> f64 {
    f64::from(t.to_scalar::<f32>().unwrap())
}

/// One PPO update of `trainable` on one sample with advantage `adv` on every trained token:
/// returns the change of the sample's mean log-prob and AdamW's first-order prediction of it.
/// The first AdamW step moves parameter i by `-lr * g_i / (|g_i| + eps)`, and the loss gradient
/// at ratio 1 is `g = -adv * d` with `d` the gradient of the mean log-prob, so the mean log-prob
/// changes by `adv * lr * sum_i d_i^2 / (|d_i| + eps)` to first order.
fn one_update(trainable: pol::Trainable, adv: f32) -> (f64, f64) {
    let loaded = tiny_loaded(3);
    let tok = loaded.tokenizer.clone();
    let policy = pol::Policy::new(&loaded, trainable, 0).unwrap();
    let pad = tok.im_end_id();
    let s = sample(&tok, "<answer>Right</answer>", 0.0);
    let lr = 1e-4;
    let eps = 1e-8;
    let before = mean_logp(policy.model(), &s, pad);
    let d = pol::ParamGrads::from_store(before.backward().unwrap(), policy.params());
    let mut predicted = 0.0;
    for i in 0..policy.params().len() {
        if let Some(g) = d.get(i) {
            for x in g.flatten_all().unwrap().to_vec1::<f32>().unwrap() {
                let x = f64::from(x);
                predicted += x * x / (x.abs() + eps);
            }
        }
    }
    predicted *= f64::from(adv) * lr;
    let refs = [&s];
    let old_logp = rows_of(
        &pol::score(&policy.sampler(), &token_batch(&refs, pad).unwrap())
            .unwrap()
            .logprobs,
        &refs,
    )
    .unwrap();
    let advantages = vec![s.loss_mask.iter().map(|m| m * adv).collect::<Vec<f32>>()];
    let est = Estimates {
        sources: Sources {
            ref_logp: Source::Absent,
            values: Source::Absent,
            ..Sources::default()
        },
        old_logp,
        ref_logp: vec![],
        values: vec![],
        returns: advantages.clone(),
        advantages,
    };
    let mut cfg = Config::default_config();
    cfg.actor.actor_lr = lr;
    cfg.actor.entropy_coeff = 0.0;
    cfg.actor.weight_decay = 0.0;
    cfg.actor.grad_clip = 1e9;
    cfg.actor.ppo_mini_batch_size = 1;
    cfg.actor.micro_batch_size = 1;
    cfg.actor.kl_after_update_freq = 1;
    let mut opt = pol::AdamW::new(
        policy.params(),
        pol::AdamWConfig {
            lr,
            weight_decay: 0.0,
            eps,
            ..pol::AdamWConfig::default()
        },
    )
    .unwrap();
    let mut m = Metrics::new();
    let models = UpdateModels {
        policy: &policy,
        actor_opt: &mut opt,
        critic: None,
    };
    update(
        &cfg,
        models,
        std::slice::from_ref(&s),
        &est,
        1,
        &mut m,
        &mut |_| {},
    )
    .unwrap();
    let after = mean_logp(&policy.sampler(), &s, pad);
    assert!(m["actor/kl_after_update"] > 0.0, "{m:?}");
    (scalar(&after) - scalar(&before), predicted)
}

fn moves_with_the_advantage(trainable: pol::Trainable) {
    for adv in [1.0f32, -1.0] {
        let (delta, predicted) = one_update(trainable.clone(), adv);
        eprintln!(
            "{trainable:?} advantage {adv}: mean log-prob moved {delta:e}, predicted {predicted:e}"
        );
        assert_eq!(
            delta.signum(),
            f64::from(adv),
            "{delta} for advantage {adv}"
        );
        assert!(
            (delta / predicted - 1.0).abs() < 0.02,
            "moved {delta:e}, AdamW's first step predicts {predicted:e}"
        );
    }
}

#[test]
fn one_update_moves_the_log_prob_with_the_advantage_full_fine_tuning() {
    moves_with_the_advantage(pol::Trainable::Full);
}

#[test]
fn one_update_moves_the_log_prob_with_the_advantage_lora() {
    moves_with_the_advantage(pol::Trainable::Lora(pol::LoraConfig {
        rank: 4,
        alpha: 8.0,
        ..pol::LoraConfig::default()
    }));
}

#[test]
fn gae_through_the_trainer_gives_return_minus_value() {
    // A critic that returns V = 0.25 everywhere (value head: weight 0, bias V). Rewards R = 1
    // and R = 0 on the last position, gamma = lambda = 1: the returns are R on every trained
    // position, the advantages R - V = 0.75 and -0.25 before verl's masked whitening.
    let loaded = tiny_loaded(5);
    let tok = loaded.tokenizer.clone();
    let policy = pol::Policy::new(&loaded, pol::Trainable::Full, 0).unwrap();
    let critic = pol::Critic::new(&loaded, pol::Trainable::Full, 0).unwrap();
    let v = 0.25f32;
    for p in critic.params() {
        match p.name.as_str() {
            "score.weight" => p.var.set(&p.var.as_tensor().zeros_like().unwrap()).unwrap(),
            "score.bias" => p
                .var
                .set(&pol::Tensor::new(&[v], &pol::Device::Cpu).unwrap())
                .unwrap(),
            _ => {}
        }
    }
    let samples = [
        sample(&tok, "<answer>Right</answer>", 1.0),
        sample(&tok, "<answer>Left</answer>", 0.0),
    ];
    let cfg = Config::default_config();
    assert_eq!((cfg.algorithm.gamma, cfg.algorithm.lam), (1.0, 1.0));
    let actor = policy.sampler();
    let scorers = Scorers {
        actor: &actor,
        reference: None,
        critic: Some(&critic),
        pad_id: tok.im_end_id(),
    };
    let mut m = Metrics::new();
    let passes = ScoringPasses {
        old_logp: true,
        values: true,
    };
    let est = estimate(&cfg, &scorers, &samples, passes, &mut m, &mut |_| {}).unwrap();
    let mut raw = Vec::new();
    for (i, (s, r)) in samples.iter().zip([1.0f32, 0.0]).enumerate() {
        for j in (0..s.loss_mask.len()).filter(|&j| s.loss_mask[j] > 0.0) {
            assert_eq!(est.values[i][j], v);
            assert_eq!(est.returns[i][j], r, "sample {i} position {j}");
            raw.push(f64::from(r - v));
        }
    }
    // verl masked_whiten over the trained positions: (x - mean) / sqrt(unbiased var + 1e-8)
    let n = raw.len() as f64;
    let mean = raw.iter().sum::<f64>() / n;
    let var = raw.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    for (i, (s, r)) in samples.iter().zip([1.0f64, 0.0]).enumerate() {
        let want = ((r - f64::from(v)) - mean) / (var + 1e-8).sqrt();
        for j in (0..s.loss_mask.len()).filter(|&j| s.loss_mask[j] > 0.0) {
            let got = f64::from(est.advantages[i][j]);
            assert!(
                (got - want).abs() < 1e-5,
                "sample {i} position {j}: {got} vs {want}"
            );
        }
    }
    // a constant critic explains none of the returns' variance
    assert!(m["critic/vf_explained_var"].abs() < 1e-4, "{m:?}");
    assert_eq!(m["critic/values/mean"], f64::from(v));
}

#[test]
fn a_resumed_run_repeats_the_uninterrupted_one() {
    // Stop after iteration 2, resume to 3: iteration 3's metrics equal those of a run that
    // never stopped (rollout, advantages, losses, norms, validation; not the wall times).
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 11);
    let cfg = |iters: u32| {
        learning_config(
            &model,
            &format!(
                "[trainer]\ntotal_training_steps = {iters}\ntest_freq = 1\nsave_freq = 1\n\
                 [es_manager.val]\nenv_groups = 8\n"
            ),
        )
    };
    let straight = train(&mut trainer(cfg(3), &dir.path().join("a"), false));
    let run_b = dir.path().join("b");
    let first = train(&mut trainer(cfg(2), &run_b, false));
    assert_eq!(first.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    let resumed_cfg = ragen_gym_starpo::RunDir::open(&run_b)
        .unwrap()
        .resume_config()
        .unwrap()
        .layer_override("trainer.total_training_steps=3")
        .unwrap()
        .build()
        .unwrap();
    let mut t = trainer(resumed_cfg, &run_b, true);
    assert_eq!(t.iteration(), 2);
    let resumed = train(&mut t);
    assert_eq!(resumed.keys().copied().collect::<Vec<_>>(), vec![3]);
    let strip = |m: &Metrics| -> Metrics {
        m.iter()
            .filter(|(k, _)| !k.starts_with("timing_s/"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let (a, b) = (strip(&straight[&3]), strip(&resumed[&3]));
    assert!(
        a.len() > 30
            && a.contains_key("actor/pg_loss")
            && a.contains_key("val-env/TwoArms/success")
    );
    assert_eq!(a, b);
}

/// SFT (`ragen_gym_starpo::sft`) on the built-in Bandit's expert: 16 demonstrations (the high
/// arm, `Dragon`, every time) in the learnability settings above. The tiny random model starts
/// far from the expert (mean trained-token log-prob below -0.3) and after 6 epochs puts more
/// than 0.9 on the expert's answer: its mean log-prob rises above ln 0.9 and validation success
/// goes from about 0.5 to at least 0.9. `train --resume` then
/// continues the run from iteration 0.
#[test]
fn sft_on_expert_demonstrations_raises_the_experts_log_prob_and_success() {
    use ragen_gym_starpo::{Demonstrations, SftTrainer};
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 3);
    let cfg = learning_config(&model, "[seed]\nsampler = 3\n");
    let t0 = std::time::Instant::now();
    let mut sft = SftTrainer::new(bandit_sft(
        &cfg,
        dir.path().join("run"),
        Demonstrations::Collect(16),
        6,
    ))
    .unwrap();
    let demos = sft.demonstrations();
    assert_eq!(demos.len(), 16);
    assert!(demos.iter().all(|t| t.success && t.turns.len() == 1));
    assert_eq!(demos[0].turns[0].response, "<answer>Dragon</answer>");
    assert_eq!(demos[3].seed, cfg.seed.train + 3);
    // One sample per demonstration; under the constraint only the arm's tokens are trained.
    assert_eq!(sft.samples().len(), 16);
    let before = sft.expert_logp().unwrap();
    let epochs = sft.train(&mut |_: &TrainEvent<'_>| Ok(())).unwrap();
    let after = sft.expert_logp().unwrap();
    let success: Vec<f64> = epochs.iter().map(|m| m["val-env/Bandit/success"]).collect();
    let loss: Vec<f64> = epochs.iter().skip(1).map(|m| m["sft/loss"]).collect();
    eprintln!(
        "sft: expert log-prob {before:.3} -> {after:.3}, loss {loss:?}, success {success:?} in {:?}",
        t0.elapsed()
    );
    // Measured once: -2.01 before (the trained tokens are the arm name's choices and the
    // end of the answer), -0.001 after 6 epochs.
    assert!(
        before < -0.3,
        "an untrained model is not sure of the arm: {before}"
    );
    assert!(after > 0.9f64.ln(), "after SFT: {after}");
    assert!((0.25..=0.75).contains(&success[0]), "{success:?}");
    assert!(success[success.len() - 1] >= 0.9, "{success:?}");
    assert!(loss[loss.len() - 1] < loss[0], "{loss:?}");
    // `train --resume` continues the SFT run directory with RL, from iteration 0.
    drop(sft); // its run-directory lock with it
    let bandit = ragen_gym_builtins::find("bandit").unwrap().native.unwrap();
    let resumed = Trainer::new(TrainSetup {
        config: cfg,
        make_env: Box::new(move || bandit("")),
        plugin_sha256: "native".into(),
        env_source: "bandit".into(),
        reward_functions: vec![],
        run_dir: dir.path().join("run"),
        resume: true,
        device: pol::Device::Cpu,
    })
    .unwrap();
    assert_eq!(resumed.iteration(), 0);
}

/// SFT packs micro-batches into shared-prefix passes as the RL update does
/// (`actor.max_tokens_per_pass`): with budget 0 each of a step's 4 micro-batches is its own pass,
/// with a large budget the 4 share one; both epochs give the same loss, gradient norm (before
/// clipping, so a wrong count of micro-batches in the loss weight would show) and expert
/// log-prob before and after the step (which `sft/expert_logp` also computes in such passes, over
/// all 8 demonstrations), within 1e-5 (shared-prefix training equals the per-sequence path
/// within 1e-5 on the tiny models, `docs/benchmarks.md`).
#[test]
fn sft_passes_share_prefixes_without_changing_the_step() {
    use ragen_gym_starpo::{Demonstrations, SftTrainer, passes};
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 4);
    let run = |budget: usize| {
        let cfg = learning_config(
            &model,
            &format!(
                "[seed]\nsampler = 3\n\
                 [actor]\nmicro_batch_size = 1\nmax_tokens_per_pass = {budget}\n"
            ),
        );
        let mut sft = SftTrainer::new(bandit_sft(
            &cfg,
            dir.path().join(format!("run-{budget}")),
            Demonstrations::Collect(8),
            1,
        ))
        .unwrap();
        let step = [0, 1, 2, 3];
        let n_passes = passes::plan(sft.samples(), &step, 1, budget).len();
        let epochs = sft.train(&mut |_: &TrainEvent<'_>| Ok(())).unwrap();
        let (before, after) = (epochs[0]["sft/expert_logp"], sft.expert_logp().unwrap());
        let m = &epochs[1];
        (n_passes, [m["sft/loss"], m["sft/grad_norm"], after], before)
    };
    let (per_micro, shared) = (run(0), run(1 << 16));
    eprintln!("passes, [loss, grad norm, expert log-prob]: {per_micro:?} and {shared:?}");
    assert_eq!((per_micro.0, shared.0), (4, 1), "passes of a 4-sample step");
    for (a, b) in per_micro.1.iter().zip(&shared.1) {
        assert!((a - b).abs() < 1e-5, "{per_micro:?} vs {shared:?}");
    }
    assert!(
        (per_micro.2 - shared.2).abs() < 1e-5,
        "expert log-prob before the step: {per_micro:?} vs {shared:?}"
    );
    // The steps moved the model: the comparison is not between two unchanged models.
    assert!((per_micro.1[2] - per_micro.2).abs() > 1e-3, "{per_micro:?}");
}

/// `sft --resume`: one epoch, then the run continued to three, gives the metrics of a run of
/// three epochs that never stopped (loss, gradient norm, expert log-prob, validation), with the
/// run's own learning rate and batch size whatever the resuming setup says; the checkpoint
/// records where it stands. A run whose checkpoint is an RL iteration, or that has no
/// checkpoint, is refused with an error naming it.
#[test]
fn a_resumed_sft_run_repeats_the_uninterrupted_one() {
    use ragen_gym_starpo::{Demonstrations, RunDir, SftProgress, SftSetup, SftTrainer, TrainError};
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 5);
    let cfg = learning_config(&model, "[seed]\nsampler = 3\n");
    let setup = |run: &str, epochs: u32, resume: bool, demonstrations| SftSetup {
        lr: 2e-3,
        resume,
        ..bandit_sft(&cfg, dir.path().join(run), demonstrations, epochs)
    };
    let quiet = &mut |_: &TrainEvent<'_>| Ok(());
    let strip = |m: &Metrics| -> Metrics {
        m.iter()
            .filter(|(k, _)| !k.starts_with("timing_s/"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let straight = SftTrainer::new(setup("a", 3, false, Demonstrations::Collect(8)))
        .unwrap()
        .train(quiet)
        .unwrap();
    let mut first = SftTrainer::new(setup("b", 1, false, Demonstrations::Collect(8))).unwrap();
    let demos = first.demonstrations().to_vec();
    first.train(quiet).unwrap();
    drop(first); // its run-directory lock with it
    let mut resumed = SftTrainer::new(SftSetup {
        lr: 0.5,
        batch_size: 1,
        ..setup("b", 3, true, Demonstrations::Given(demos.clone()))
    })
    .unwrap();
    assert_eq!(resumed.epochs_done(), 1);
    let later = resumed.train(quiet).unwrap();
    let epochs = |ms: &[Metrics]| -> Vec<f64> { ms.iter().map(|m| m["sft/epoch"]).collect() };
    assert_eq!(
        (epochs(&straight), epochs(&later)),
        (vec![0.0, 1.0, 2.0, 3.0], vec![2.0, 3.0])
    );
    for (a, b) in straight[2..].iter().zip(&later) {
        let (a, b) = (strip(a), strip(b));
        assert!(a.contains_key("sft/loss") && a.contains_key("val-env/Bandit/success"));
        assert_eq!(a, b);
    }
    let run_b = RunDir::open(&dir.path().join("b")).unwrap();
    let state = run_b.read_trainer_state().unwrap();
    assert_eq!(
        (state.iteration, state.sft),
        (
            0,
            Some(SftProgress {
                epoch: 3,
                lr: 2e-3,
                batch_size: 4,
                schedule: ragen_gym_starpo::SftSchedule::default(),
            })
        )
    );
    drop(resumed); // its run-directory lock with it
    // The checkpoint of an RL iteration (as `train --resume` writes it) is not an SFT epoch.
    let path = run_b.checkpoint_path().join("trainer_state.json");
    let rl = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"iteration\": 0", "\"iteration\": 1");
    assert!(rl.contains("\"iteration\": 1"), "{rl}");
    std::fs::write(&path, rl).unwrap();
    let refused = |run: &str| match SftTrainer::new(setup(
        run,
        4,
        true,
        Demonstrations::Given(demos.clone()),
    )) {
        Err(TrainError::Resume(m)) => m,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("{run} was continued"),
    };
    let m = refused("b");
    assert!(m.contains("RL iteration 1") && m.contains("/b"), "{m}");
    // Nothing to continue: a run directory without a checkpoint.
    let m = refused("c");
    assert!(m.contains("no checkpoint") && m.contains("/c"), "{m}");
    // A checkpoint without its trainer_state.json: files were removed, not "no epoch".
    std::fs::remove_file(&path).unwrap();
    let m = refused("b");
    assert!(
        m.contains("checkpoint/trainer_state.json: missing from the checkpoint"),
        "{m}"
    );
}

/// `sft`'s cosine schedule and sparse validation: with 8 demonstrations in batches of 4 (2 steps
/// an epoch) over 3 epochs, the rate of each epoch's last step is half a cosine over the 6 steps
/// (hand values: 2e-3 x (1 + cos(pi k / 6)) / 2 for k = 1, 3, 5); with `val_every = 2` the
/// validation and the expert's log-prob run before training and after epochs 2 and 3 only. A run
/// stopped in its second epoch (a reporter error, as a crash) and resumed with the same
/// `--epochs` repeats the uninterrupted one, its schedule read from the checkpoint.
#[test]
fn sft_decays_its_rate_on_a_cosine_and_validates_every_n_epochs() {
    use ragen_gym_starpo::config::WarmupStyle;
    use ragen_gym_starpo::{Demonstrations, RunDir, SftSchedule, SftSetup, SftTrainer};
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&dir.path().join("model"), 5);
    let cfg = learning_config(&model, "[seed]\nsampler = 3\n");
    let cosine = SftSchedule {
        style: WarmupStyle::Cosine,
        warmup_ratio: 0.0,
    };
    let setup = |run: &str, resume: bool, demonstrations| SftSetup {
        lr: 2e-3,
        schedule: cosine,
        val_every: 2,
        resume,
        ..bandit_sft(&cfg, dir.path().join(run), demonstrations, 3)
    };
    let strip = |m: &Metrics| -> Metrics {
        m.iter()
            .filter(|(k, _)| !k.starts_with("timing_s/"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let straight = SftTrainer::new(setup("a", false, Demonstrations::Collect(8)))
        .unwrap()
        .train(&mut |_: &TrainEvent<'_>| Ok(()))
        .unwrap();
    let lrs: Vec<f64> = straight[1..].iter().map(|m| m["actor/lr"]).collect();
    for (got, want) in lrs
        .iter()
        .zip([2e-3 * 0.933_012_7, 1e-3, 2e-3 * 0.066_987_3])
    {
        assert!((got - want).abs() < 1e-9, "{lrs:?}");
    }
    let validated: Vec<(f64, bool, bool)> = straight
        .iter()
        .map(|m| {
            (
                m["sft/epoch"],
                m.contains_key("val-env/Bandit/success"),
                m.contains_key("sft/expert_logp"),
            )
        })
        .collect();
    assert_eq!(
        validated,
        vec![
            (0.0, true, true),
            (1.0, false, false),
            (2.0, true, true),
            (3.0, true, true)
        ]
    );
    // Stopped during epoch 2, after epoch 1's checkpoint.
    let mut first = SftTrainer::new(setup("b", false, Demonstrations::Collect(8))).unwrap();
    let demos = first.demonstrations().to_vec();
    let stop = first.train(&mut |e: &TrainEvent<'_>| match e {
        TrainEvent::Progress { iteration: 2, .. } => Err("killed".into()),
        _ => Ok(()),
    });
    assert!(stop.is_err());
    drop(first); // its run-directory lock with it
    let mut resumed = SftTrainer::new(SftSetup {
        lr: 0.5,
        schedule: SftSchedule::default(),
        ..setup("b", true, Demonstrations::Given(demos))
    })
    .unwrap();
    assert_eq!(resumed.epochs_done(), 1);
    let later = resumed.train(&mut |_: &TrainEvent<'_>| Ok(())).unwrap();
    assert_eq!(later.len(), 2);
    for (a, b) in straight[2..].iter().zip(&later) {
        assert_eq!(strip(a), strip(b));
    }
    let state = RunDir::open(&dir.path().join("b"))
        .unwrap()
        .read_trainer_state()
        .unwrap();
    assert_eq!(state.sft.unwrap().schedule, cosine);
}
