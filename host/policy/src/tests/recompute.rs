//! Activation checkpointing (`model/recompute.rs`).

use super::*;

/// Activation checkpointing recomputes each layer in the backward: the loss and every gradient
/// equal the plain computation (full fine-tuning and LoRA, Llama and Qwen2 shapes).
#[test]
fn gradient_checkpointing_gives_the_same_gradients() {
    for cfg in [tiny_cfg(), tiny_qwen_cfg()] {
        let loaded = tiny_loaded(cfg, 31);
        for trainable in [Trainable::Full, Trainable::Lora(LoraConfig::default())] {
            let mut policy = Policy::new(&loaded, trainable.clone(), 4).unwrap();
            set_lora_b(&policy, |i| ((i % 5) as f32 - 2.0) * 0.02);
            let batch = tiny_batch();
            let mut run = |on: bool| {
                policy.set_gradient_checkpointing(on);
                assert_eq!(policy.model().gradient_checkpointing(), on);
                let s = score(policy.model(), &batch).unwrap();
                let loss = (nll(policy.model(), &batch)
                    + s.entropy.sum_all().unwrap().affine(0.01, 0.0))
                .unwrap();
                let l = scalar(&loss);
                (
                    l,
                    ParamGrads::from_store(loss.backward().unwrap(), policy.params()),
                )
            };
            let (la, ga) = run(false);
            let (lb, gb) = run(true);
            assert!((la - lb).abs() < 1e-6, "{trainable:?}: loss {la} vs {lb}");
            for (i, p) in policy.params().iter().enumerate() {
                let a = ga
                    .get(i)
                    .unwrap_or_else(|| panic!("{}: no gradient", p.name));
                let b = gb
                    .get(i)
                    .unwrap_or_else(|| panic!("{}: no gradient with checkpointing", p.name));
                let d = max_abs(&(a - b).unwrap());
                assert!(
                    d <= 1e-6 * max_abs(a).max(1e-3),
                    "{} ({trainable:?}): grads differ by {d}",
                    p.name
                );
            }
        }
    }
}
