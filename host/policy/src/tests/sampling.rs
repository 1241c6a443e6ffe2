//! Sampling: batching, left padding and chunked prefill do not change the samples, and the
//! sampler's log-probs are the scorer's.

use super::*;

#[test]
fn left_padded_batch_equals_prompts_one_by_one() {
    let loaded = tiny_loaded(tiny_cfg(), 8);
    let model = loaded.frozen_model().unwrap();
    let tok = &loaded.tokenizer;
    let prompts: Vec<Vec<u32>> = ["hi", "a much longer prompt here", "mid size"]
        .iter()
        .map(|p| tok.encode_chat(&[Message::user(*p)], true).unwrap())
        .collect();
    let params = SamplingParams {
        max_new_tokens: 12,
        ..Default::default()
    };
    let batched = sample(&model, tok, &prompts, &params).unwrap();
    for (p, b) in prompts.iter().zip(&batched) {
        let single = &sample(&model, tok, std::slice::from_ref(p), &params).unwrap()[0];
        assert_eq!(single.tokens, b.tokens);
        for (x, y) in single.logprobs.iter().zip(&b.logprobs) {
            assert!((x - y).abs() < 1e-4, "{x} vs {y}");
        }
    }
    // Seeded sampling is reproducible and independent of the batch's other rows.
    let hot = SamplingParams {
        temperature: 1.0,
        top_p: 0.9,
        top_k: 50,
        max_new_tokens: 10,
        seed: 4,
        ..Default::default()
    };
    let s1 = sample(&model, tok, &prompts, &hot).unwrap();
    let s2 = sample(&model, tok, &prompts, &hot).unwrap();
    assert_eq!(s1, s2);
}

#[test]
fn sampler_and_scorer_logprobs_agree() {
    let loaded = tiny_loaded(tiny_qwen_cfg(), 9);
    let policy = Policy::new(&loaded, Trainable::Full, 0).unwrap();
    let tok = &loaded.tokenizer;
    let prompts: Vec<Vec<u32>> = ["one", "two three four"]
        .iter()
        .map(|p| tok.encode_chat(&[Message::user(*p)], true).unwrap())
        .collect();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 16,
        seed: 3,
        ..Default::default()
    };
    let samples = sample(&policy.sampler(), tok, &prompts, &params).unwrap();
    let responses: Vec<Vec<u32>> = samples.iter().map(|s| s.tokens.clone()).collect();
    let batch = TokenBatch::prompts_and_responses(&prompts, &responses, 0).unwrap();
    let scores = score(policy.model(), &batch).unwrap();
    let lp: Vec<Vec<f32>> = scores.logprobs.to_vec2().unwrap();
    let ent: Vec<Vec<f32>> = scores.entropy.to_vec2().unwrap();
    for (r, (p, s)) in prompts.iter().zip(&samples).enumerate() {
        for (j, x) in s.logprobs.iter().enumerate() {
            let y = lp[r][p.len() - 1 + j];
            assert!(
                (x - y).abs() < 1e-4,
                "row {r} token {j}: sampler {x} scorer {y}"
            );
            assert!(ent[r][p.len() - 1 + j] > 0.0);
        }
    }
    // Entropy of a near-uniform tiny model is close to ln V.
    assert!(ent[0][prompts[0].len() - 1] > 0.5 * (TINY_VOCAB as f32).ln());
}

/// Prefilling prompts in row chunks (how long prompts at batch 128 fit a GPU) gives the same
/// samples as one prefill of the whole batch.
#[test]
fn chunked_prefill_samples_like_one_prefill() {
    let loaded = tiny_loaded(tiny_qwen_cfg(), 23);
    let model = loaded.frozen_model().unwrap();
    let tok = &loaded.tokenizer;
    let prompts: Vec<Vec<u32>> = ["a", "bb cc", "ddd eee fff", "g"]
        .iter()
        .map(|p| tok.encode_chat(&[Message::user(*p)], true).unwrap())
        .collect();
    for temperature in [0.0, 1.0] {
        let params = SamplingParams {
            temperature,
            max_new_tokens: 12,
            seed: 5,
            ..Default::default()
        };
        let whole = sample(&model, tok, &prompts, &params).unwrap();
        // A budget of one byte: every row is its own chunk.
        let chunked =
            crate::sampling::sample_chunked(&model, tok, &prompts, &params, None, 1).unwrap();
        for (a, b) in whole.iter().zip(&chunked) {
            assert_eq!(a.tokens, b.tokens, "T={temperature}");
            for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }
}
