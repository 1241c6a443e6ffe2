//! Log-probability of the chosen token and entropy of the full distribution, straight from the
//! final hidden states and the lm_head weight, in row chunks: the `[N, V]` logits never exist
//! whole (at V = 49152 they are 200 MB per copy for 1024 tokens), and the backward recomputes
//! each chunk's logits instead of keeping them (the idea of Liger-Kernel's fused linear
//! cross-entropy, Hsu et al. 2024, arXiv 2410.10989).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::gemm::{Mat, gemm};
use super::{slice, tensor, with_slice, zeros};

/// Rows of logits computed at once: 128 × 49152 f32 is 25 MB.
const CHUNK: usize = 128;

struct TokenLogprobs {
    /// Target token of each row.
    targets: Arc<Vec<u32>>,
}

/// Per-row statistics of shifted logits `z = logits − max`: `ln Σ exp z` and the entropy.
fn row_stats(z: &mut [f32]) -> (f32, f32, f32) {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // f64 sums: 49152 f32 terms summed in f32 lose ~1e-4 of log-prob.
    let mut s = 0.0f64;
    let mut ez = 0.0f64;
    for x in z.iter_mut() {
        *x -= m;
        let e = x.exp();
        s += f64::from(e);
        ez += f64::from(e * *x);
    }
    let lse = s.ln();
    // entropy = −Σ p log p = lse − Σ p z
    (m, lse as f32, (lse - ez / s) as f32)
}

impl TokenLogprobs {
    fn dims(&self, h: &Shape, w: &Shape) -> candle_core::Result<(usize, usize, usize)> {
        let (n, d) = h.dims2()?;
        let (v, wd) = w.dims2()?;
        if wd != d || self.targets.len() != n {
            return Err(candle_core::Error::Msg(
                "fused-logprobs: hidden, weight and targets disagree".into(),
            ));
        }
        if self.targets.iter().any(|&t| t as usize >= v) {
            return Err(candle_core::Error::Msg(
                "fused-logprobs: target outside the vocabulary".into(),
            ));
        }
        Ok((n, d, v))
    }

    /// Shifted logits of rows `r0..r0+c` of `h` [N, D] into `buf` [c, V] for `w` [V, D];
    /// returns (lse, entropy) per row.
    fn chunk(
        &self,
        h: Mat<'_>,
        w: Mat<'_>,
        r0: usize,
        c: usize,
        buf: &mut [f32],
    ) -> Vec<(f32, f32)> {
        let (d, v) = (h.cols, w.rows);
        let threads = crate::cpu::num_threads();
        let hm = Mat::rows(&h.data[r0 * d..], c, d, d);
        gemm(&mut buf[..c * v], v, hm, w.t(), 1.0, false, threads);
        buf[..c * v]
            .par_chunks_mut(v)
            .map(|z| {
                let (_, lse, ent) = row_stats(z);
                (lse, ent)
            })
            .collect()
    }
}

impl CustomOp2 for TokenLogprobs {
    fn name(&self) -> &'static str {
        "fused-logprobs"
    }

    fn cpu_fwd(
        &self,
        hs: &CpuStorage,
        hl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, d, v) = self.dims(hl.shape(), wl.shape())?;
        let h = slice(hs, hl, self.name())?;
        let w = slice(ws, wl, self.name())?;
        let (hm, wm) = (Mat::rows(h, n, d, d), Mat::rows(w, v, d, d));
        let mut out = zeros(n * 2);
        let mut buf = zeros(CHUNK.min(n) * v);
        for r0 in (0..n).step_by(CHUNK) {
            let c = CHUNK.min(n - r0);
            let stats = self.chunk(hm, wm, r0, c, &mut buf);
            for (i, (lse, ent)) in stats.into_iter().enumerate() {
                let t = self.targets[r0 + i] as usize;
                out[(r0 + i) * 2] = buf[i * v + t] - lse;
                out[(r0 + i) * 2 + 1] = ent;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((n, 2))))
    }

    fn bwd(
        &self,
        hid: &Tensor,
        weight: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (n, d, v) = self.dims(hid.shape(), weight.shape())?;
        let want_w = weight.track_op();
        let name = self.name();
        let threads = crate::cpu::num_threads();
        let (dh, dw) = with_slice(hid, name, |h| {
            with_slice(weight, name, |w| {
                with_slice(g, name, |g| {
                    let (hm, wm) = (Mat::rows(h, n, d, d), Mat::rows(w, v, d, d));
                    let mut dh = zeros(n * d);
                    let mut dw = if want_w { zeros(v * d) } else { vec![] };
                    let mut buf = zeros(CHUNK.min(n) * v);
                    for r0 in (0..n).step_by(CHUNK) {
                        let c = CHUNK.min(n - r0);
                        let stats = self.chunk(hm, wm, r0, c, &mut buf);
                        // dz_j = g_lp (δ_jt − p_j) − g_ent p_j (log p_j + H)
                        buf[..c * v]
                            .par_chunks_mut(v)
                            .enumerate()
                            .for_each(|(i, z)| {
                                let (lse, ent) = stats[i];
                                let (glp, gent) = (g[(r0 + i) * 2], g[(r0 + i) * 2 + 1]);
                                for x in z.iter_mut() {
                                    let logp = *x - lse;
                                    let p = logp.exp();
                                    *x = -glp * p - gent * p * (logp + ent);
                                }
                                z[self.targets[r0 + i] as usize] += glp;
                            });
                        let dz = Mat::rows(&buf, c, v, v);
                        gemm(&mut dh[r0 * d..], d, dz, wm, 1.0, false, threads);
                        if want_w {
                            let hc = Mat::rows(&h[r0 * d..], c, d, d);
                            gemm(&mut dw, d, dz.t(), hc, 1.0, true, threads);
                        }
                    }
                    (dh, dw)
                })
            })
        })???;
        Ok((
            Some(tensor(dh, hid.dims())?),
            want_w.then(|| tensor(dw, weight.dims())).transpose()?,
        ))
    }
}

/// `(log p(target), entropy)` per row of `hidden` [N, D] under `softmax(hidden · weightᵀ)`, with
/// `weight` [V, D]; returns [N, 2]. f32 CPU tensors.
pub(crate) fn token_logprobs(
    hidden: &Tensor,
    weight: &Tensor,
    targets: Vec<u32>,
) -> candle_core::Result<Tensor> {
    hidden.contiguous()?.apply_op2(
        &weight.contiguous()?,
        TokenLogprobs {
            targets: Arc::new(targets),
        },
    )
}
