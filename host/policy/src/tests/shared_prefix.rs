//! Shared-prefix training (`shared_prefix.rs`, `model/shared.rs`) against the per-sequence padded
//! path: log-probs, entropy, values, the loss and every parameter gradient.

use super::*;
use std::sync::Arc;

/// Two groups of three members: each group shares its prompt, the groups share their first four
/// tokens; within a group two members share the first response token, one member has two turns
/// (a second prompt and response after its first), one response is a prefix of another's and
/// two members are identical. Response tokens are scored, one of them as a constrained choice.
pub(crate) fn grouped_batch() -> TokenBatch {
    let p1: Vec<u32> = vec![1, 40, 41, 42, 43, 44, 45, 2, 1, 46];
    let p2: Vec<u32> = vec![1, 40, 41, 42, 60, 61, 2, 1, 62];
    let responses: [(&[u32], &[u32]); 6] = [
        (&p1, &[50, 51, 52, 2]),
        (&p1, &[50, 53, 2, 1, 47, 48, 2, 1, 46, 54, 55, 2]),
        (&p1, &[56, 2]),
        (&p2, &[70, 71, 2]),
        (&p2, &[70, 71, 2]),
        (&p2, &[70]),
    ];
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = responses
        .iter()
        .map(|(p, r)| {
            let ids: Vec<u32> = p.iter().chain(r.iter()).copied().collect();
            let mask = (0..ids.len()).map(|i| u8::from(i >= p.len())).collect();
            (ids, mask)
        })
        .collect();
    let mut kinds: Vec<Vec<TokenKind>> = seqs
        .iter()
        .map(|(ids, _)| vec![TokenKind::Free; ids.len()])
        .collect();
    kinds[2][p1.len()] = TokenKind::Choice(Arc::from(vec![50u32, 56, 57]));
    TokenBatch::right_padded(&seqs, 2)
        .unwrap()
        .with_constraints(kinds)
        .unwrap()
}

/// Scores and values of `batch` with prefix sharing on and off, and the gradients of a loss on
/// both: equal within `tol` (relative to the largest gradient of each tensor).
pub(crate) fn assert_shared_equals_padded(
    model: &LlamaModel,
    critic: Option<&Critic>,
    params: &[NamedParam],
    batch: &TokenBatch,
    tol: f32,
) {
    assert!(model.shares_training_prefixes());
    let run = |on: bool| {
        let m = model.with_shared_prefixes(on);
        let s = score(&m, batch).unwrap();
        let lp = s.logprobs.sum_all().unwrap();
        let loss = (lp.neg().unwrap() + s.entropy.sum_all().unwrap().affine(0.1, 0.0)).unwrap();
        let g = ParamGrads::from_store(loss.backward().unwrap(), params);
        (s, scalar(&loss), g)
    };
    let (a, loss_a, ga) = run(true);
    let (b, loss_b, gb) = run(false);
    let close = |x: &Tensor, y: &Tensor, what: &str| {
        let d = max_abs(&(x - y).unwrap());
        assert!(d <= tol, "{what}: shared and padded differ by {d}");
    };
    close(&a.logprobs, &b.logprobs, "log-probs");
    close(&a.entropy, &b.entropy, "entropy");
    assert!(
        (loss_a - loss_b).abs() <= tol * loss_b.abs().max(1.0),
        "{loss_a} vs {loss_b}"
    );
    for (i, p) in params.iter().enumerate() {
        let (x, y) = (ga.get(i).unwrap(), gb.get(i).unwrap());
        let scale = max_abs(y).max(1e-3);
        let d = max_abs(&(x - y).unwrap());
        assert!(
            d <= tol * scale,
            "{}: gradients differ by {d} (max {scale})",
            p.name
        );
    }
    let Some(critic) = critic else { return };
    // Values at the real cells, and the critic's gradients.
    let valid = Tensor::from_vec(
        batch
            .attention_mask
            .iter()
            .flatten()
            .map(|&m| f32::from(m))
            .collect::<Vec<f32>>(),
        (batch.batch_size(), batch.seq_len()),
        &Device::Cpu,
    )
    .unwrap();
    let run = |on: bool| {
        let mut c = critic.clone();
        c.set_shared_prefixes(on);
        let v = (c.values(batch).unwrap() * &valid).unwrap();
        let loss = v.sqr().unwrap().sum_all().unwrap();
        (
            v,
            ParamGrads::from_store(loss.backward().unwrap(), critic.params()),
        )
    };
    let ((va, ga), (vb, gb)) = (run(true), run(false));
    close(&va, &vb, "values");
    for (i, p) in critic.params().iter().enumerate() {
        let (x, y) = (ga.get(i).unwrap(), gb.get(i).unwrap());
        let scale = max_abs(y).max(1e-3);
        let d = max_abs(&(x - y).unwrap());
        assert!(
            d <= tol * scale,
            "critic {}: gradients differ by {d}",
            p.name
        );
    }
}

#[test]
fn shared_prefix_training_equals_the_per_sequence_path() {
    let batch = grouped_batch();
    for cfg in [tiny_cfg(), tiny_qwen_cfg()] {
        let loaded = tiny_loaded(cfg, 31);
        for trainable in [Trainable::Full, Trainable::Lora(LoraConfig::default())] {
            let policy = Policy::new(&loaded, trainable.clone(), 5).unwrap();
            set_lora_b(&policy, |i| ((i % 5) as f32 - 2.0) * 0.02);
            let critic = Critic::new(&loaded, trainable, 6).unwrap();
            assert_shared_equals_padded(
                policy.model(),
                Some(&critic),
                policy.params(),
                &batch,
                1e-5,
            );
        }
    }
}

#[test]
fn the_tree_of_the_grouped_batch_computes_each_prefix_once() {
    let batch = grouped_batch();
    let tree = crate::shared_prefix::PrefixTree::new(&batch);
    // 4 shared tokens; the rest of each prompt (6 and 5); group 1: 50 51 52 2 | 53 2 1 47 48 2 1
    // 46 54 55 2 | 56 2; group 2: 70 71 2 (two members and a prefix of them).
    assert_eq!(tree.len(), 4 + 6 + 5 + 4 + 11 + 2 + 3);
    assert!(tree.len() < batch.num_tokens());
}
