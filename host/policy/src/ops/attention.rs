//! Grouped-query scaled dot-product attention (Ainslie et al. 2023, arXiv 2305.13245) with an
//! additive mask, as one node.
//!
//! Q, K and V are read in the layouts the projections produce (`[B, T, heads, hd]`), and the
//! output is written as `[B, T, H·hd]`, the o_proj input, so no transposes or copies of K/V are
//! made. The softmax probabilities are recomputed in the backward from Q and K (as
//! FlashAttention does, Dao et al. 2022, arXiv 2205.14135), so no `[B, H, T, Tk]` tensor outlives
//! the op. Query head `j` reads key/value head `j / (H / KV)`.
//!
//! Queries are taken in blocks of [`QUERY_BLOCK`], and a block's scores, softmax and products
//! run only over the keys up to the last one any of its queries may attend to (its mask row's
//! last open entry, [`key_limits`]): masked keys past that have probability exactly 0, so the
//! result is the dense one's, and a causal square costs about half of itself (FlashAttention's
//! block skipping, arXiv 2205.14135 §3.1, at the granularity of query blocks). The backward runs
//! one task per (row, query head) and sums the query heads' key and value gradients per kv head,
//! so a model with 3 kv heads (SmolLM2-135M) gives two cores 9 tasks a row, not 3. Shared-prefix
//! training (`crate::model::shared`) gathers each call's keys so that ancestors come first and a
//! segment's own keys after them, which keeps the open keys of a query at the front.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, D, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::gemm::{Mat, gemm};
use super::{slice, tensor, with_slice, zeros};

/// Shapes of one call: q [b, t, h, hd], k/v [b, tk, kv, hd].
#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    h: usize,
    kv: usize,
    tk: usize,
    hd: usize,
}

/// An additive attention mask on the host with each query's key limit, computed once per
/// forward and read by every layer's call (the limits were scanned out of the mask per layer).
#[derive(Debug, Clone)]
pub(crate) struct HostMask {
    /// Additive mask [B, T, Tk]: 0 where a query may attend, a large negative value elsewhere.
    bias: Arc<Vec<f32>>,
    /// Per query (row-major [B, T]): the keys past which every entry of its mask row is masked,
    /// so scores, softmax and products stop there ([`key_limits`]).
    limits: Arc<Vec<usize>>,
    /// Keys per mask row.
    tk: usize,
}

impl HostMask {
    /// The mask `bias` ([B, T, `tk`] row-major) and its key limits.
    pub(crate) fn new(bias: impl Into<Arc<Vec<f32>>>, tk: usize) -> Self {
        let bias = bias.into();
        let limits = Arc::new(key_limits(&bias, tk));
        Self { bias, limits, tk }
    }
}

struct Attention {
    mask: HostMask,
    scale: f32,
}

/// Queries per block: a block computes its scores over the keys up to its rows' largest limit,
/// so a causal square costs about half of itself plus a block's diagonal strip.
const QUERY_BLOCK: usize = 32;

/// Bias entries at or below this are masked (the masks write -1e9).
const MASKED: f32 = -1e8;

/// The (query, key) pairs the fused kernel computes for `rows` rows of `tq` queries over `tk`
/// keys under `bias` ([rows, tq, tk]): each block of [`QUERY_BLOCK`] queries over the keys up to
/// its largest limit (what the FLOP count of a forward calls attention work, `crate::flops`).
pub(crate) fn computed_pairs(bias: &[f32], rows: usize, tq: usize, tk: usize) -> u64 {
    let limits = key_limits(bias, tk);
    (0..rows)
        .flat_map(|r| {
            let lim = &limits[r * tq..(r + 1) * tq];
            lim.chunks(QUERY_BLOCK)
                .map(|b| (b.len() * b.iter().copied().max().unwrap_or(tk)) as u64)
        })
        .sum()
}

/// For each query row of `bias` ([rows, tk] row-major), one past its last unmasked key; `tk` for
/// a row with no unmasked key, whose softmax over all-masked scores is then computed in full as
/// before (padding queries; their outputs are not read).
pub(super) fn key_limits(bias: &[f32], tk: usize) -> Vec<usize> {
    bias.chunks(tk.max(1))
        .map(|row| {
            row.iter()
                .rposition(|&x| x > MASKED)
                .map_or(tk, |last| last + 1)
        })
        .collect()
}

impl Attention {
    fn dims(&self, q: &Shape, k: &Shape, v: &Shape) -> candle_core::Result<Dims> {
        let (b, t, h, hd) = q.dims4()?;
        let (kb, tk, kv, khd) = k.dims4()?;
        let bad = |m: &str| Err(candle_core::Error::Msg(format!("fused-attention: {m}")));
        if kb != b || khd != hd || k != v {
            return bad("q, k, v shapes differ");
        }
        if kv == 0 || h % kv != 0 {
            return bad("query heads are not a multiple of key/value heads");
        }
        if self.mask.tk != tk || self.mask.bias.len() != b * t * tk {
            return bad("mask shape");
        }
        Ok(Dims {
            b,
            t,
            h,
            kv,
            tk,
            hd,
        })
    }

    /// The query blocks of row `bi`: (first query, queries, keys the block reads).
    fn blocks(&self, d: Dims, bi: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        (0..d.t).step_by(QUERY_BLOCK).map(move |r0| {
            let nb = QUERY_BLOCK.min(d.t - r0);
            let lim = &self.mask.limits[bi * d.t + r0..bi * d.t + r0 + nb];
            (r0, nb, lim.iter().copied().max().unwrap_or(d.tk))
        })
    }

    /// Softmax probabilities [nb, kmax] (row stride `kmax`) of queries `r0..r0 + nb` of query head
    /// `hi` in row `bi` over keys `0..kmax`; the keys past `kmax` are masked for all of them, so
    /// their probabilities are exactly 0 and left out.
    fn probs_block(
        &self,
        d: Dims,
        q: &[f32],
        k: &[f32],
        (bi, hi): (usize, usize),
        (r0, nb, kmax): (usize, usize, usize),
        p: &mut [f32],
    ) {
        let g = hi / (d.h / d.kv);
        let qm = Mat::rows(
            &q[((bi * d.t + r0) * d.h + hi) * d.hd..],
            nb,
            d.hd,
            d.h * d.hd,
        );
        let km = Mat::rows(&k[(bi * d.tk * d.kv + g) * d.hd..], kmax, d.hd, d.kv * d.hd);
        gemm(&mut p[..nb * kmax], kmax, qm, km.t(), self.scale, false, 1);
        let bias = &self.mask.bias[(bi * d.t + r0) * d.tk..];
        for (row, brow) in p.chunks_mut(kmax).take(nb).zip(bias.chunks(d.tk)) {
            let mut m = f32::NEG_INFINITY;
            for (x, b) in row.iter_mut().zip(&brow[..kmax]) {
                *x += b;
                m = m.max(*x);
            }
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
    }

    /// The gradients of task `item` = (row `bi`, query head `hi`): its dq block [t, hd] and its
    /// share of the dk, dv blocks [tk, hd] of kv head `hi / rep`. `x` holds q, k, v and dout.
    /// Each query block reads only the keys up to its limit.
    fn head_grads(&self, d: Dims, x: [&[f32]; 4], item: usize) -> GroupGrads {
        let [q, k, v, dout] = x;
        let rep = d.h / d.kv;
        let (bi, hi) = (item / d.h, item % d.h);
        let g = hi / rep;
        let off_kv = (bi * d.tk * d.kv + g) * d.hd;
        let mut dq = zeros(d.t * d.hd);
        let mut dk = zeros(d.tk * d.hd);
        let mut dv = zeros(d.tk * d.hd);
        let mut p = zeros(QUERY_BLOCK.min(d.t) * d.tk);
        let mut dp = zeros(QUERY_BLOCK.min(d.t) * d.tk);
        for (r0, nb, kmax) in self.blocks(d, bi) {
            let km = Mat::rows(&k[off_kv..], kmax, d.hd, d.kv * d.hd);
            let vm = Mat::rows(&v[off_kv..], kmax, d.hd, d.kv * d.hd);
            let off_q = ((bi * d.t + r0) * d.h + hi) * d.hd;
            let qm = Mat::rows(&q[off_q..], nb, d.hd, d.h * d.hd);
            let dom = Mat::rows(&dout[off_q..], nb, d.hd, d.h * d.hd);
            self.probs_block(d, q, k, (bi, hi), (r0, nb, kmax), &mut p);
            let pm = Mat::rows(&p, nb, kmax, kmax);
            // dV += Pᵀ dO
            gemm(&mut dv, d.hd, pm.t(), dom, 1.0, true, 1);
            // dP = dO Vᵀ; dS = P ∘ (dP − rowsum(dP ∘ P))
            gemm(&mut dp[..nb * kmax], kmax, dom, vm.t(), 1.0, false, 1);
            for (dprow, prow) in dp.chunks_mut(kmax).zip(p.chunks(kmax)).take(nb) {
                let dot: f32 = dprow.iter().zip(prow).map(|(a, b)| a * b).sum();
                for (x, pv) in dprow.iter_mut().zip(prow) {
                    *x = pv * (*x - dot);
                }
            }
            let dsm = Mat::rows(&dp, nb, kmax, kmax);
            // dQ = scale · dS K; dK += scale · dSᵀ Q
            gemm(&mut dq[r0 * d.hd..], d.hd, dsm, km, self.scale, false, 1);
            gemm(&mut dk, d.hd, dsm.t(), qm, self.scale, true, 1);
        }
        (dq, dk, dv)
    }
}

/// One backward task's gradient blocks: dq of its query head, and its share of the dk and dv of
/// its kv head (summed over the kv head's query heads by [`scatter_grads`]).
type GroupGrads = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The tasks' gradient blocks written into dq [B, T, H, hd] and dk, dv [B, Tk, KV, hd] (the
/// `rep` query heads of a kv head summed in head order).
fn scatter_grads(d: Dims, parts: &[GroupGrads]) -> GroupGrads {
    let rep = d.h / d.kv;
    let mut dq = zeros(d.b * d.t * d.h * d.hd);
    let mut dk = zeros(d.b * d.tk * d.kv * d.hd);
    let mut dv = zeros(d.b * d.tk * d.kv * d.hd);
    for (item, (pq, pk, pv)) in parts.iter().enumerate() {
        let (bi, hi) = (item / d.h, item % d.h);
        let g = hi / rep;
        for ti in 0..d.t {
            let dst = ((bi * d.t + ti) * d.h + hi) * d.hd;
            let src = ti * d.hd;
            dq[dst..dst + d.hd].copy_from_slice(&pq[src..src + d.hd]);
        }
        for ti in 0..d.tk {
            let dst = ((bi * d.tk + ti) * d.kv + g) * d.hd;
            let src = ti * d.hd;
            for (o, x) in dk[dst..dst + d.hd].iter_mut().zip(&pk[src..src + d.hd]) {
                *o += x;
            }
            for (o, x) in dv[dst..dst + d.hd].iter_mut().zip(&pv[src..src + d.hd]) {
                *o += x;
            }
        }
    }
    (dq, dk, dv)
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "fused-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.dims(ql.shape(), kl.shape(), vl.shape())?;
        let q = slice(qs, ql, self.name())?;
        let k = slice(ks, kl, self.name())?;
        let v = slice(vs, vl, self.name())?;
        let rep = d.h / d.kv;
        // One task per (row, query head); each returns its [t, hd] output block.
        let blocks: Vec<Vec<f32>> = (0..d.b * d.h)
            .into_par_iter()
            .map(|item| {
                let (bi, hi) = (item / d.h, item % d.h);
                let mut p = zeros(QUERY_BLOCK.min(d.t) * d.tk);
                let mut o = zeros(d.t * d.hd);
                for (r0, nb, kmax) in self.blocks(d, bi) {
                    self.probs_block(d, q, k, (bi, hi), (r0, nb, kmax), &mut p);
                    let vm = Mat::rows(
                        &v[(bi * d.tk * d.kv + hi / rep) * d.hd..],
                        kmax,
                        d.hd,
                        d.kv * d.hd,
                    );
                    let pm = Mat::rows(&p, nb, kmax, kmax);
                    gemm(&mut o[r0 * d.hd..], d.hd, pm, vm, 1.0, false, 1);
                }
                o
            })
            .collect();
        let mut out = zeros(d.b * d.t * d.h * d.hd);
        for (item, o) in blocks.iter().enumerate() {
            let (bi, hi) = (item / d.h, item % d.h);
            for ti in 0..d.t {
                let dst = ((bi * d.t + ti) * d.h + hi) * d.hd;
                out[dst..dst + d.hd].copy_from_slice(&o[ti * d.hd..(ti + 1) * d.hd]);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((d.b, d.t, d.h * d.hd))))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        dout: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = self.dims(q.shape(), k.shape(), v.shape())?;
        let name = self.name();
        let (dq, dk, dv) = with_slice(q, name, |q| {
            with_slice(k, name, |k| {
                with_slice(v, name, |v| {
                    with_slice(dout, name, |dout| {
                        // One task per (row, query head): H tasks a row, not KV, so two
                        // cores stay busy on a model with few kv heads.
                        let parts: Vec<GroupGrads> = (0..d.b * d.h)
                            .into_par_iter()
                            .map(|item| self.head_grads(d, [q, k, v, dout], item))
                            .collect();
                        scatter_grads(d, &parts)
                    })
                })
            })
        })????;
        Ok((
            Some(tensor(dq, q.dims())?),
            Some(tensor(dk, k.dims())?),
            Some(tensor(dv, v.dims())?),
        ))
    }
}

/// Attention of `q` [B, T, H, hd] over `k`, `v` [B, Tk, KV, hd] with the additive mask `mask`
/// [B, T, Tk]; returns [B, T, H·hd]. f32 CPU tensors.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &HostMask,
    scale: f64,
) -> candle_core::Result<Tensor> {
    q.contiguous()?.apply_op3(
        &k.contiguous()?,
        &v.contiguous()?,
        Attention {
            mask: mask.clone(),
            scale: scale as f32,
        },
    )
}

/// The composed twin of [`attention`] (differentiable candle ops; any device and dtype):
/// q [B, H, T, hd], k/v [B, KV, Tk, hd], additive mask [B, 1, 1, T, Tk]; returns [B, T, H·hd].
/// Scores and softmax in f32, the probabilities times V in `dtype`.
pub(crate) fn sdpa_composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    rep: usize,
    dtype: DType,
) -> candle_core::Result<Tensor> {
    let (b, h, t, hd) = q.dims4()?;
    let kv = h / rep;
    let tk = k.dim(2)?;
    // Grouped-query attention: query head j uses kv head j / rep, so [B, H, T, hd] reshapes
    // to [B, KV, rep*T, hd] without copying K/V.
    let q = q
        .affine(1.0 / (hd as f64).sqrt(), 0.0)?
        .reshape((b, kv, rep * t, hd))?;
    let scores = q.matmul(&k.t()?)?.to_dtype(DType::F32)?; // [B, KV, rep*T, Tk]
    let scores = scores.reshape((b, kv, rep, t, tk))?.broadcast_add(bias)?;
    let probs = softmax_last_dim(&scores)?
        .reshape((b, kv, rep * t, tk))?
        .to_dtype(dtype)?;
    let out = probs.matmul(&v.contiguous()?)?; // [B, KV, rep*T, hd]
    out.reshape((b, h, t, hd))?
        .transpose(1, 2)?
        .reshape((b, t, h * hd))
}

/// Softmax over the last dim with a detached max (the backward skips the max reduce).
fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    let s = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&s)
}
