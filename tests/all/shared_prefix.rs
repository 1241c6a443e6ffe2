//! Passes of several micro-batches (`actor.max_tokens_per_pass`, `host/starpo/src/passes.rs`)
//! with shared-prefix training: the same update as one pass per micro-batch (verl's
//! `micro_batch_size` weighting), for GAE and GRPO, full fine-tuning and LoRA, micro-batches of
//! 1 and 2. The samples share their prompt, as a group's members do.

use crate::scoring_from_update::{
    four_samples, lora_rank4, max_abs_diff, one_update, same_metrics,
};
use ragen_gym_policy as pol;
use ragen_gym_starpo::Config;
use ragen_gym_starpo::advantages::ScoringPasses;
use ragen_gym_starpo::config::AdvEstimator;

#[test]
fn passes_of_several_micro_batches_give_the_gradients_of_one_pass_each() {
    let dir = tempfile::tempdir().unwrap();
    let tok = pol::load_tokenizer(&crate::learning::tiny_model(dir.path(), 9)).unwrap();
    let samples = four_samples(&tok);
    let lora = lora_rank4();
    for (estimator, trainable, micro) in [
        (AdvEstimator::Gae, pol::Trainable::Full, 1),
        (AdvEstimator::Gae, lora.clone(), 2),
        (AdvEstimator::Grpo, pol::Trainable::Full, 2),
        (AdvEstimator::Grpo, lora, 1),
    ] {
        let what = format!("{estimator:?}, {trainable:?}, micro-batches of {micro}");
        let mut cfg = Config::default_config();
        cfg.algorithm.adv_estimator = estimator;
        cfg.actor.ppo_mini_batch_size = 4;
        cfg.actor.micro_batch_size = micro;
        cfg.actor.kl_after_update_freq = 1;
        cfg.actor.grad_clip = 1e9;
        cfg.critic.grad_clip = 1e9;
        let run = |budget: usize, passes: ScoringPasses| {
            let mut cfg = cfg.clone();
            cfg.actor.max_tokens_per_pass = budget;
            one_update(&cfg, &trainable, &samples, passes)
        };
        for passes in [
            ScoringPasses::for_update(&cfg, samples.len(), 1),
            ScoringPasses {
                old_logp: true,
                values: true,
            },
        ] {
            // One pass per micro-batch (verl), then all of them in one pass.
            let (e1, m1, d1) = run(0, passes);
            let (e2, m2, d2) = run(4096, passes);
            assert!(max_abs_diff(&e1.old_logp, &e2.old_logp) <= 1e-5, "{what}");
            assert!(max_abs_diff(&e1.values, &e2.values) <= 1e-5, "{what}");
            assert!(
                max_abs_diff(&e1.advantages, &e2.advantages) <= 1e-5,
                "{what}"
            );
            same_metrics(&m1, &m2, 1e-5, &what);
            let scale = d1.iter().flatten().fold(0.0f32, |a, x| a.max(x.abs()));
            assert!(scale > 0.0, "{what}");
            let diff = max_abs_diff(&d1, &d2);
            assert!(
                diff <= 1e-5 * scale,
                "{what}: {diff} vs largest change {scale}"
            );
        }
    }
}
