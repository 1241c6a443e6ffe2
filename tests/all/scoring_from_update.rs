//! Old log-probs and old values from the update's own forward (`trainer.scoring_from_update`,
//! `configs/default.toml`): with one optimiser step per update they equal the separate scoring
//! passes' (within 1e-6), the update's gradients are unchanged (GAE and GRPO, full fine-tuning
//! and LoRA, several micro-batches), and two trainer iterations give the same metrics but for
//! timing.

use ragen_gym_policy as pol;
use ragen_gym_starpo::advantages::{Estimates, Scorers, ScoringPasses, Source, Sources, estimate};
use ragen_gym_starpo::batch::TrainSample;
use ragen_gym_starpo::update::{UpdateModels, update};
use ragen_gym_starpo::{Config, ConfigBuilder, Metrics};

/// A one-turn sequence: a fixed question, `answer` as the trained assistant segment (RAGEN's
/// mask, `docs/ragen-semantics.md` §5) and `reward` on the last position.
pub(crate) fn sample(tok: &pol::Tokenizer, answer: &str, reward: f32, index: usize) -> TrainSample {
    let user = pol::Message::user("Pull one of two arms, Left or Right.");
    let ids = tok
        .encode_chat(&[user, pol::Message::assistant(answer)], false)
        .unwrap();
    let own = tok
        .encode_chat(&[pol::Message::assistant(answer)], false)
        .unwrap()
        .len();
    let l = ids.len();
    let mut token_rewards = vec![0.0; l - 1];
    token_rewards[l - 2] = reward;
    TrainSample {
        input_ids: ids,
        loss_mask: (0..l - 1)
            .map(|j| f32::from(u8::from(j >= l - own)))
            .collect(),
        token_rewards,
        choices: vec![],
        rollout_logp: vec![],
        group: index / 2,
        index,
        turns: Vec::new(),
    }
}

/// AdamW whose first step moves each weight by `lr * g / (|g| + eps)`, about `g * lr / eps` for
/// this large `eps`: the parameter change is proportional to the gradient, so equal changes mean
/// equal gradients.
fn linear_adamw(params: &[pol::NamedParam]) -> pol::AdamW {
    let cfg = pol::AdamWConfig {
        lr: 1e-3,
        weight_decay: 0.0,
        eps: 1e3,
        ..pol::AdamWConfig::default()
    };
    pol::AdamW::new(params, cfg).unwrap()
}

fn values_of(params: &[pol::NamedParam]) -> Vec<Vec<f32>> {
    params
        .iter()
        .map(|p| p.var.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

/// One update of fresh models (the same weights every call) on `samples`, with the scoring
/// passes `passes`: the estimates it used, its metrics, and each parameter's change (actor's,
/// then critic's).
/// Four one-turn samples of one prompt (a group's members): two answers, an unparsable one and
/// a two-action one, with their rewards.
pub(crate) fn four_samples(tok: &pol::Tokenizer) -> Vec<TrainSample> {
    [
        "<answer>Left</answer>",
        "<answer>Right</answer>",
        "no",
        "<answer>Left || Right</answer>",
    ]
    .iter()
    .enumerate()
    .map(|(i, a)| sample(tok, a, [1.0, 0.0, -0.1, 0.5][i], i))
    .collect()
}

/// LoRA of rank 4 (alpha 8) on the default projections.
pub(crate) fn lora_rank4() -> pol::Trainable {
    pol::Trainable::Lora(pol::LoraConfig {
        rank: 4,
        alpha: 8.0,
        ..pol::LoraConfig::default()
    })
}

pub(crate) fn one_update(
    cfg: &Config,
    trainable: &pol::Trainable,
    samples: &[TrainSample],
    passes: ScoringPasses,
) -> (Estimates, Metrics, Vec<Vec<f32>>) {
    let dir = tempfile::tempdir().unwrap();
    let loaded = pol::load(&crate::learning::tiny_model(dir.path(), 9)).unwrap();
    let policy = pol::Policy::new(&loaded, trainable.clone(), 0).unwrap();
    let gae = cfg.algorithm.adv_estimator == ragen_gym_starpo::config::AdvEstimator::Gae;
    let critic = gae.then(|| pol::Critic::new(&loaded, trainable.clone(), 0).unwrap());
    let mut actor_opt = linear_adamw(policy.params());
    let mut critic_opt = critic.as_ref().map(|c| linear_adamw(c.params()));
    let before: Vec<Vec<f32>> = values_of(policy.params())
        .into_iter()
        .chain(critic.iter().flat_map(|c| values_of(c.params())))
        .collect();
    let actor = policy.sampler();
    let scorers = Scorers {
        actor: &actor,
        reference: None,
        critic: critic.as_ref(),
        pad_id: loaded.tokenizer.im_end_id(),
    };
    let mut m = Metrics::new();
    let est = estimate(cfg, &scorers, samples, passes, &mut m, &mut |_| {}).unwrap();
    // What the passes left out is marked as left to the update, and is empty until then.
    let left = |scored: bool| {
        if scored {
            Source::Scored
        } else {
            Source::FromUpdate
        }
    };
    assert_eq!(est.sources.old_logp, left(passes.old_logp));
    assert_eq!(est.old_logp.is_empty(), !passes.old_logp);
    if critic.is_some() {
        assert_eq!(est.sources.values, left(passes.values));
        assert_eq!(est.sources.advantages, left(passes.values));
    } else {
        assert_eq!(est.sources.values, Source::Absent);
        assert_eq!(est.sources.advantages, Source::Scored);
    }
    assert_eq!(est.sources.ref_logp, Source::Absent);
    let models = UpdateModels {
        policy: &policy,
        actor_opt: &mut actor_opt,
        critic: critic.as_ref().zip(critic_opt.as_mut()),
    };
    let est = update(cfg, models, samples, &est, 1, &mut m, &mut |_| {}).unwrap();
    let after = values_of(policy.params())
        .into_iter()
        .chain(critic.iter().flat_map(|c| values_of(c.params())));
    let deltas = before
        .iter()
        .zip(after)
        .map(|(b, a)| a.iter().zip(b).map(|(x, y)| x - y).collect())
        .collect();
    (est, m, deltas)
}

pub(crate) fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

/// Every metric but `timing_s/*` of `a` is in `b` with the same value, relative to `tol`.
pub(crate) fn same_metrics(a: &Metrics, b: &Metrics, tol: f64, what: &str) {
    let keys = |m: &Metrics| -> Vec<String> {
        m.keys()
            .filter(|k| !k.starts_with("timing_s/"))
            .cloned()
            .collect()
    };
    assert_eq!(keys(a), keys(b), "{what}");
    for k in keys(a) {
        let (x, y) = (a[&k], b[&k]);
        let same = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * y.abs().max(1.0);
        assert!(
            same,
            "{what}: {k} is {x} from the update's forward, {y} scored apart"
        );
    }
}

#[test]
fn old_logp_and_values_from_the_update_forward_equal_the_scoring_passes() {
    let dir = tempfile::tempdir().unwrap();
    let tok = pol::load_tokenizer(&crate::learning::tiny_model(dir.path(), 9)).unwrap();
    let samples = four_samples(&tok);
    let lora = lora_rank4();
    for (estimator, trainable) in [
        ("gae", pol::Trainable::Full),
        ("gae", lora.clone()),
        ("grpo", pol::Trainable::Full),
        ("grpo", lora),
    ] {
        let what = format!("{estimator}, {trainable:?}");
        let mut cfg = Config::default_config();
        cfg.algorithm.adv_estimator = match estimator {
            "gae" => ragen_gym_starpo::config::AdvEstimator::Gae,
            _ => ragen_gym_starpo::config::AdvEstimator::Grpo,
        };
        cfg.actor.ppo_mini_batch_size = 4;
        cfg.actor.micro_batch_size = 2;
        cfg.actor.kl_after_update_freq = 1;
        cfg.actor.grad_clip = 1e9;
        cfg.critic.grad_clip = 1e9;
        // One optimiser step per update, no KL in the reward: the update's forward replaces
        // both passes.
        let fused = ScoringPasses::for_update(&cfg, samples.len(), 1);
        assert_eq!(
            fused,
            ScoringPasses {
                old_logp: false,
                values: false
            }
        );
        let apart = ScoringPasses {
            old_logp: true,
            values: true,
        };
        let (e1, m1, d1) = one_update(&cfg, &trainable, &samples, fused);
        let (e2, m2, d2) = one_update(&cfg, &trainable, &samples, apart);
        assert!(max_abs_diff(&e1.old_logp, &e2.old_logp) <= 1e-6, "{what}");
        assert!(max_abs_diff(&e1.values, &e2.values) <= 1e-6, "{what}");
        assert!(
            max_abs_diff(&e1.advantages, &e2.advantages) <= 1e-6,
            "{what}"
        );
        assert!(max_abs_diff(&e1.returns, &e2.returns) <= 1e-6, "{what}");
        assert_eq!(e1.values.is_empty(), estimator == "grpo");
        // The update completes what was left to it.
        let values = if estimator == "grpo" {
            Source::Absent
        } else {
            Source::Scored
        };
        let complete = Sources {
            old_logp: Source::Scored,
            ref_logp: Source::Absent,
            values,
            advantages: Source::Scored,
        };
        assert_eq!((e1.sources, e2.sources), (complete, complete), "{what}");
        same_metrics(&m1, &m2, 1e-6, &what);
        assert!(m1["actor/grad_norm"] > 0.0, "{what}: {m1:?}");
        // Each parameter moved by the same amount: the same gradients.
        let scale = d2.iter().flatten().fold(0.0f32, |a, x| a.max(x.abs()));
        assert!(scale > 0.0);
        let diff = max_abs_diff(&d1, &d2);
        assert!(
            diff <= 1e-5 * scale,
            "{what}: {diff} vs largest change {scale}"
        );
    }
}

/// Two iterations' metrics of a fresh trainer with `trainer.scoring_from_update = on`.
fn two_iterations(
    model: &std::path::Path,
    run_dir: &std::path::Path,
    extra: &str,
    on: bool,
) -> Vec<Metrics> {
    let config = ConfigBuilder::new()
        .layer_str(
            "[trainer]\ntotal_training_steps = 2\nsave_freq = -1\nlog_trajectories = 0\n\
             [es_manager.train]\nenv_groups = 3\ngroup_size = 2\n\
             [es_manager.val]\nenv_groups = 1\ngroup_size = 1\n\
             [agent_proxy]\nmax_turn = 2\n\
             [rollout]\nresponse_length = 8\nrollout_filter_ratio = 1.0\n\
             [actor]\nactor_lr = 1e-3\nppo_mini_batch_size = 6\nmicro_batch_size = 3\nkl_after_update_freq = 1\n\
             [critic]\ncritic_lr = 1e-3\n\
             [model]\nlora_rank = 0\n",
            "the scoring test config",
        )
        .unwrap()
        .layer_str(extra, "the test's estimator")
        .unwrap()
        .layer_override(&format!("trainer.scoring_from_update={on}"))
        .unwrap()
        .set_str("model.path", &model.display().to_string(), "the test")
        .unwrap()
        .build()
        .unwrap();
    crate::prefix_sharing::echo_iterations(config, run_dir, 2)
}

#[test]
fn trainer_metrics_are_the_same_with_scoring_from_the_update() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::learning::tiny_model(&dir.path().join("model"), 7);
    for extra in [
        "[algorithm]\nadv_estimator = \"gae\"\n",
        "[algorithm]\nadv_estimator = \"grpo\"\n[agent_proxy.reward_normalization]\nmethod = \"mean_std\"\n",
    ] {
        let on = two_iterations(&model, &dir.path().join("on"), extra, true);
        let off = two_iterations(&model, &dir.path().join("off"), extra, false);
        for (it, (a, b)) in on.iter().zip(&off).enumerate() {
            // The second iteration starts from weights one float rounding apart.
            same_metrics(a, b, 1e-5, &format!("{extra} iteration {}", it + 1));
        }
    }
}
