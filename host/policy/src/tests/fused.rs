//! The fused CPU kernels (`ops/`) against their composed twins on whole models.

use super::*;

/// The fused CPU kernels (`ops`) against the composed candle ops, on whole models: scores,
/// entropy and every parameter gradient, full fine-tuning and LoRA, Llama and Qwen2 shapes; and
/// greedy sampling through the KV cache.
#[test]
fn fused_model_equals_composed_model() {
    for cfg in [tiny_cfg(), tiny_qwen_cfg()] {
        let loaded = tiny_loaded(cfg.clone(), 21);
        for trainable in [Trainable::Full, Trainable::Lora(LoraConfig::default())] {
            let policy = Policy::new(&loaded, trainable.clone(), 3).unwrap();
            // Non-zero B so LoRA gradients reach A too.
            set_lora_b(&policy, |i| ((i % 7) as f32 - 3.0) * 0.01);
            let batch = tiny_batch();
            let run = |fused: bool| {
                let m = policy.model().with_fused(fused);
                let s = score(&m, &batch).unwrap();
                let loss =
                    (nll(&m, &batch) + s.entropy.sum_all().unwrap().affine(0.01, 0.0)).unwrap();
                let g = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
                let lp: Vec<Vec<f32>> = s.logprobs.to_vec2().unwrap();
                let ent: Vec<Vec<f32>> = s.entropy.to_vec2().unwrap();
                (lp, ent, g)
            };
            let (lp_a, ent_a, g_a) = run(true);
            let (lp_b, ent_b, g_b) = run(false);
            for (ra, rb) in lp_a.iter().chain(&ent_a).zip(lp_b.iter().chain(&ent_b)) {
                for (x, y) in ra.iter().zip(rb) {
                    assert!(
                        (x - y).abs() < 1e-5,
                        "{trainable:?}: fused {x} vs composed {y}"
                    );
                }
            }
            for (i, p) in policy.params().iter().enumerate() {
                let (a, b) = (g_a.get(i).unwrap(), g_b.get(i).unwrap());
                let scale = max_abs(b).max(1e-6);
                let d = max_abs(&(a - b).unwrap());
                assert!(
                    d <= 1e-4 * scale,
                    "{} ({trainable:?}): grads differ by {d}",
                    p.name
                );
            }
        }
        // Sampling through the KV cache: same greedy tokens and log-probs.
        let model = loaded.frozen_model().unwrap();
        let tok = &loaded.tokenizer;
        let prompts: Vec<Vec<u32>> = ["hi", "a longer prompt"]
            .iter()
            .map(|p| tok.encode_chat(&[Message::user(*p)], true).unwrap())
            .collect();
        let params = SamplingParams {
            max_new_tokens: 10,
            ..Default::default()
        };
        let a = sample(&model.with_fused(true), tok, &prompts, &params).unwrap();
        let b = sample(&model.with_fused(false), tok, &prompts, &params).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.tokens, y.tokens);
            for (p, q) in x.logprobs.iter().zip(&y.logprobs) {
                assert!((p - q).abs() < 1e-5, "{p} vs {q}");
            }
        }
    }
}
