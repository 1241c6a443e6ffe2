//! Each fused kernel against the composition of differentiable candle ops it replaces: forward
//! values and the gradients of every input under a random linear loss.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RopeTables;
use crate::scoring::logprobs_and_entropy;

fn rand_vec(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale)
        .collect()
}

fn var(rng: &mut ChaCha8Rng, dims: &[usize], scale: f32) -> Var {
    let n = dims.iter().product();
    Var::from_tensor(&Tensor::from_vec(rand_vec(rng, n, scale), dims, &Device::Cpu).unwrap())
        .unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Compare `fused(inputs)` with `composed(inputs)`: outputs, and the gradients of
/// `sum(out · R)` with respect to every input, within `tol` (relative to the largest value).
fn check(
    name: &str,
    inputs: &[Var],
    fused: impl Fn(&[Tensor]) -> Tensor,
    composed: impl Fn(&[Tensor]) -> Tensor,
    tol: f32,
) {
    let ts: Vec<Tensor> = inputs.iter().map(|v| v.as_tensor().clone()).collect();
    let a = fused(&ts);
    let b = composed(&ts);
    let scale = |t: &Tensor| {
        let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().fold(1e-3f32, |m, x| m.max(x.abs()))
    };
    let d = max_abs_diff(&a, &b);
    assert!(d <= tol * scale(&b), "{name} forward differs by {d}");
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let r = Tensor::from_vec(
        rand_vec(&mut rng, b.elem_count(), 1.0),
        b.dims(),
        &Device::Cpu,
    )
    .unwrap();
    let ga = (a * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let gb = (b * &r).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, v) in inputs.iter().enumerate() {
        let x = ga
            .get(v.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no fused grad {i}"));
        let y = gb.get(v.as_tensor()).unwrap();
        let d = max_abs_diff(x, y);
        assert!(
            d <= tol * scale(y),
            "{name} grad of input {i} differs by {d} (scale {})",
            scale(y)
        );
    }
}

#[test]
fn fused_rms_norm_matches_composition() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let x = var(&mut rng, &[3, 5, 16], 2.0);
    let w = var(&mut rng, &[16], 1.0);
    check(
        "rms_norm",
        &[x, w],
        |t| super::rms_norm(&t[0], &t[1], 1e-5).unwrap(),
        |t| super::rms_norm_composed(&t[0], &t[1], 1e-5).unwrap(),
        1e-5,
    );
}

#[test]
fn fused_swiglu_matches_composition() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let g = var(&mut rng, &[7, 33], 4.0);
    let u = var(&mut rng, &[7, 33], 1.0);
    check(
        "swiglu",
        &[g, u],
        |t| super::swiglu(&t[0], &t[1]).unwrap(),
        |t| (t[0].silu().unwrap() * &t[1]).unwrap(),
        1e-5,
    );
}

fn rope_tables(
    rng: &mut ChaCha8Rng,
    b: usize,
    t: usize,
    half: usize,
) -> (RopeTables, Tensor, Tensor) {
    let angles = rand_vec(rng, b * t * half, 3.0);
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    let ct = Tensor::from_slice(&cos, (b, 1, t, half), &Device::Cpu).unwrap();
    let st = Tensor::from_slice(&sin, (b, 1, t, half), &Device::Cpu).unwrap();
    (
        RopeTables {
            cos: Arc::new(cos),
            sin: Arc::new(sin),
        },
        ct,
        st,
    )
}

#[test]
fn fused_rope_matches_composition() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (b, t, heads, hd) = (2, 5, 3, 8);
    let (tables, cos, sin) = rope_tables(&mut rng, b, t, hd / 2);
    let x = var(&mut rng, &[b, t, heads, hd], 1.0);
    check(
        "rope",
        &[x],
        |ts| super::rope(&ts[0], &tables).unwrap(),
        |ts| {
            let y = super::rope_composed(&ts[0].transpose(1, 2).unwrap(), &cos, &sin).unwrap();
            y.transpose(1, 2).unwrap().contiguous().unwrap()
        },
        1e-6,
    );
}

/// Fused attention against its composed twin, values and the gradients of q, k and v, on
/// random inputs of `(b, t, tk, h, kv, hd)` under the mask `open(row, query, key)`.
fn check_attention(
    name: &str,
    seed: u64,
    (b, t, tk, h, kv, hd): (usize, usize, usize, usize, usize, usize),
    open: impl Fn(usize, usize, usize) -> bool,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let q = var(&mut rng, &[b, t, h, hd], 1.5);
    let k = var(&mut rng, &[b, tk, kv, hd], 1.5);
    let v = var(&mut rng, &[b, tk, kv, hd], 1.0);
    let bias: Vec<f32> = (0..b * t * tk)
        .map(|x| {
            let (bi, i, kk) = (x / (t * tk), x / tk % t, x % tk);
            if open(bi, i, kk) { 0.0 } else { -1e9 }
        })
        .collect();
    let bias_t = Tensor::from_slice(&bias, (b, 1, 1, t, tk), &Device::Cpu).unwrap();
    let mask = super::HostMask::new(bias, tk);
    let scale = 1.0 / (hd as f64).sqrt();
    check(
        name,
        &[q, k, v],
        |ts| super::attention(&ts[0], &ts[1], &ts[2], &mask, scale).unwrap(),
        |ts| {
            let q = ts[0].transpose(1, 2).unwrap().contiguous().unwrap();
            let k = ts[1].transpose(1, 2).unwrap().contiguous().unwrap();
            let v = ts[2].transpose(1, 2).unwrap().contiguous().unwrap();
            super::sdpa_composed(&q, &k, &v, &bias_t, h / kv, DType::F32).unwrap()
        },
        1e-5,
    );
}

#[test]
fn fused_attention_matches_composition() {
    // 6 query heads over 2 kv heads; 3 new queries over 7 keys (a cache of 4); row 1 has two
    // padding keys in front.
    let (t, tk) = (3, 7);
    check_attention("attention", 4, (2, t, tk, 6, 2, 8), |bi, i, kk| {
        kk <= tk - t + i && !(bi == 1 && kk < 2)
    });
}

/// Causal self-attention over 150 queries (blocks of 32, the last one short): rows with leading
/// padding keys, a row whose queries past 100 see nothing (fully masked rows), values and all
/// gradients against the composed twin.
#[test]
fn fused_attention_skips_masked_blocks_exactly() {
    check_attention(
        "attention-blocks",
        6,
        (3, 150, 150, 4, 2, 8),
        |bi, i, kk| {
            match bi {
                0 => kk <= i,
                1 => kk <= i && kk >= 7, // seven padding keys in front
                _ => kk <= i && i < 100, // queries past 100 see no key
            }
        },
    );
}

#[test]
fn attention_key_limits_are_one_past_the_last_open_key() {
    // Rows: causal row 0 (key 0 open), a padded row (keys 2..=3 open), a fully masked row.
    let m = -1e9f32;
    let bias = [0.0, m, m, m, m, m, 0.0, 0.0, m, m, m, m];
    assert_eq!(super::attention::key_limits(&bias, 4), vec![1, 4, 4]);
}

/// A mask is read with the key length it was built for: 12 entries built as 2 queries x 6 keys
/// are refused for 3 queries x 4 keys (the same count, so a length check alone let them through),
/// and accepted as 3 x 4.
#[test]
fn attention_refuses_a_mask_built_for_another_key_length() {
    let q = Tensor::zeros((1, 3, 1, 2), DType::F32, &Device::Cpu).unwrap();
    let kv = Tensor::zeros((1, 4, 1, 2), DType::F32, &Device::Cpu).unwrap();
    let wrong = super::HostMask::new(vec![0.0; 12], 6);
    let err = super::attention(&q, &kv, &kv, &wrong, 1.0).unwrap_err();
    assert!(err.to_string().contains("mask shape"), "{err}");
    let right = super::HostMask::new(vec![0.0; 12], 4);
    let out = super::attention(&q, &kv, &kv, &right, 1.0).unwrap();
    assert_eq!(out.dims(), &[1, 3, 2]);
}

#[test]
fn fused_token_logprobs_matches_composition() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    // More rows than one chunk, so chunk boundaries are exercised.
    let (n, d, vocab) = (300, 16, 50);
    let h = var(&mut rng, &[n, d], 1.0);
    let w = var(&mut rng, &[vocab, d], 1.0);
    let targets: Vec<u32> = (0..n).map(|i| ((i * 7 + 3) % vocab) as u32).collect();
    let tgt = Tensor::from_slice(&targets, (n, 1), &Device::Cpu).unwrap();
    check(
        "token_logprobs",
        &[h, w],
        |ts| super::token_logprobs(&ts[0], &ts[1], targets.clone()).unwrap(),
        |ts| {
            let logits = ts[0].matmul(&ts[1].t().unwrap()).unwrap();
            let (lp, ent) = logprobs_and_entropy(&logits, &tgt).unwrap();
            Tensor::stack(&[lp, ent], 1).unwrap()
        },
        1e-5,
    );
}
