//! Grouped-query attention of new tokens over cached key/value blocks, for sampling with prefix
//! caching ([`crate::prefix_cache`]; `docs/ragen-semantics.md`, "Prefix sharing in rollouts").
//! Inference only: no backward.
//!
//! A sequence's keys are a chain of blocks read in place: a prefix shared with other sequences
//! (a group's first-turn prompt), then blocks of its own (the history it produced). Its `n` new
//! tokens are the last `n` keys of the chain, so query `i` attends to the first `L - n + i + 1`
//! of the chain's `L` keys (causal); no mask table and no left padding are needed. Keys and
//! values are `[len, KV, hd]` per block, the projection layout of
//! [`crate::ops::attention`].

use rayon::prelude::*;

use super::gemm::{Mat, gemm};
use super::zeros;

/// One block of cached keys and values, `len` positions of `[KV, hd]` each.
#[derive(Clone, Copy)]
pub(crate) struct KvBlock<'a> {
    pub(crate) k: &'a [f32],
    pub(crate) v: &'a [f32],
    pub(crate) len: usize,
}

/// The queries of one sequence: rows `t0..t0 + n` of the packed query matrix, and the chain of
/// blocks it reads, whose last `n` keys are its own new tokens.
pub(crate) struct ChainQuery<'a> {
    pub(crate) t0: usize,
    pub(crate) n: usize,
    pub(crate) blocks: Vec<KvBlock<'a>>,
}

/// Head shapes: query heads, key/value heads, head size.
#[derive(Clone, Copy)]
pub(crate) struct Heads {
    pub(crate) h: usize,
    pub(crate) kv: usize,
    pub(crate) hd: usize,
}

/// Queries up to this many per sequence use dot products; longer ones (prefill) use GEMM.
const DOT_QUERIES: usize = 4;

/// `Σ a_i b_i` in eight lanes (vectorised by the compiler).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Softmax of one row in place.
fn softmax(row: &mut [f32]) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0f32;
    for x in row.iter_mut() {
        *x = (*x - m).exp();
        s += *x;
    }
    let inv = 1.0 / s;
    for x in row.iter_mut() {
        *x *= inv;
    }
}

/// The `[n, hd]` output of query head `hi` of one sequence.
fn head_output(q: &[f32], s: &ChainQuery<'_>, hs: Heads, hi: usize, scale: f32) -> Vec<f32> {
    let Heads { h, kv, hd } = hs;
    let g = hi / (h / kv);
    let kvd = kv * hd;
    let total: usize = s.blocks.iter().map(|b| b.len).sum();
    let mut out = zeros(s.n * hd);
    if s.n <= DOT_QUERIES {
        let mut p = Vec::with_capacity(total);
        for i in 0..s.n {
            let qi = &q[((s.t0 + i) * h + hi) * hd..][..hd];
            let visible = total - s.n + i + 1;
            p.clear();
            'blocks: for b in &s.blocks {
                for j in 0..b.len {
                    if p.len() == visible {
                        break 'blocks;
                    }
                    p.push(dot(qi, &b.k[j * kvd + g * hd..][..hd]) * scale);
                }
            }
            softmax(&mut p);
            let o = &mut out[i * hd..(i + 1) * hd];
            let mut j = 0;
            'values: for b in &s.blocks {
                for r in 0..b.len {
                    if j == visible {
                        break 'values;
                    }
                    let w = p[j];
                    for (x, y) in o.iter_mut().zip(&b.v[r * kvd + g * hd..][..hd]) {
                        *x += w * y;
                    }
                    j += 1;
                }
            }
        }
        return out;
    }
    let qm = Mat::rows(&q[(s.t0 * h + hi) * hd..], s.n, hd, h * hd);
    let mut scores = zeros(s.n * total);
    let mut off = 0;
    for b in &s.blocks {
        if b.len > 0 {
            let km = Mat::rows(&b.k[g * hd..], b.len, hd, kvd);
            gemm(&mut scores[off..], total, qm, km.t(), scale, false, 1);
        }
        off += b.len;
    }
    for (i, row) in scores.chunks_mut(total).enumerate() {
        row[total - s.n + i + 1..].fill(f32::NEG_INFINITY);
        softmax(row);
    }
    let mut off = 0;
    for b in &s.blocks {
        if b.len > 0 {
            let pm = Mat::rows(&scores[off..], s.n, b.len, total);
            let vm = Mat::rows(&b.v[g * hd..], b.len, hd, kvd);
            gemm(&mut out, hd, pm, vm, 1.0, true, 1);
        }
        off += b.len;
    }
    out
}

/// Attention of the packed queries `q` [N, H, hd] (after RoPE) of every sequence over its chain
/// of blocks; returns `[N, H·hd]`. One task per (sequence, query head).
pub(crate) fn chain_attention(
    q: &[f32],
    seqs: &[ChainQuery<'_>],
    hs: Heads,
    scale: f32,
) -> Vec<f32> {
    let n_tokens: usize = seqs.iter().map(|s| s.n).sum();
    let blocks: Vec<Vec<f32>> = (0..seqs.len() * hs.h)
        .into_par_iter()
        .map(|item| head_output(q, &seqs[item / hs.h], hs, item % hs.h, scale))
        .collect();
    let mut out = zeros(n_tokens * hs.h * hs.hd);
    for (item, o) in blocks.iter().enumerate() {
        let (s, hi) = (&seqs[item / hs.h], item % hs.h);
        for i in 0..s.n {
            let dst = ((s.t0 + i) * hs.h + hi) * hs.hd;
            out[dst..dst + hs.hd].copy_from_slice(&o[i * hs.hd..(i + 1) * hs.hd]);
        }
    }
    out
}
