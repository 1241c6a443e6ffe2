//! RMSNorm `y = x / sqrt(mean(x²) + eps) · w` (Zhang & Sennrich 2019) as one node.

use candle_core::{CpuStorage, CustomOp2, D, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{slice, tensor, with_slice, zeros};

struct RmsNorm {
    eps: f32,
}

/// 1 / sqrt(mean(x²) + eps) of one row.
fn rstd(row: &[f32], eps: f32) -> f32 {
    let ss: f32 = row.iter().map(|v| v * v).sum();
    1.0 / (ss / row.len() as f32 + eps).sqrt()
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "fused-rms-norm"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(xs, xl, self.name())?;
        let w = slice(ws, wl, self.name())?;
        let d = w.len();
        let mut y = zeros(x.len());
        y.par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .with_min_len(16)
            .for_each(|(y, x)| {
                let r = rstd(x, self.eps);
                for i in 0..d {
                    y[i] = x[i] * r * w[i];
                }
            });
        Ok((CpuStorage::F32(y), xl.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let d = w.elem_count();
        let eps = self.eps;
        let (dx, dw) = with_slice(x, self.name(), |x| {
            with_slice(w, self.name(), |w| {
                with_slice(g, self.name(), |g| {
                    let rows = x.len() / d;
                    let mut dx = zeros(x.len());
                    // Per-thread partial sums of dw, reduced at the end.
                    let chunk = rows.div_ceil(crate::cpu::num_threads().max(1)).max(1);
                    let partial: Vec<Vec<f32>> = dx
                        .par_chunks_mut(chunk * d)
                        .enumerate()
                        .map(|(c, dx)| {
                            let mut dw = vec![0.0f32; d];
                            for (r, dx) in dx.chunks_mut(d).enumerate() {
                                let row = c * chunk + r;
                                let x = &x[row * d..(row + 1) * d];
                                let g = &g[row * d..(row + 1) * d];
                                let rs = rstd(x, eps);
                                // xhat = x·rs; dy·w = gw; dx = rs·(gw − xhat·mean(gw·xhat)).
                                let mut dot = 0.0f32;
                                for i in 0..d {
                                    let xh = x[i] * rs;
                                    dw[i] += g[i] * xh;
                                    dot += g[i] * w[i] * xh;
                                }
                                let mean = dot / d as f32;
                                for i in 0..d {
                                    dx[i] = rs * (g[i] * w[i] - x[i] * rs * mean);
                                }
                            }
                            dw
                        })
                        .collect();
                    let mut dw = vec![0.0f32; d];
                    for p in partial {
                        for i in 0..d {
                            dw[i] += p[i];
                        }
                    }
                    (dx, dw)
                })
            })
        })???;
        Ok((
            Some(tensor(dx, x.dims())?),
            w.track_op().then(|| tensor(dw, w.dims())).transpose()?,
        ))
    }
}

/// RMSNorm over the last dim of an f32 CPU tensor `x` [.., D] with weight `w` [D].
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}

/// The composed twin of [`rms_norm`] (differentiable candle ops; any device and dtype), in f32:
/// `x / sqrt(mean(x²) + eps) · w`; [.., D] -> [.., D] f32.
pub(crate) fn rms_norm_composed(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (ms + eps)?.sqrt()?.recip()?;
    x.broadcast_mul(&inv)?
        .broadcast_mul(&w.to_dtype(DType::F32)?)
}
