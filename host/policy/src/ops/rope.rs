//! Rotary position embedding (Su et al. 2021, arXiv 2104.09864) in Hugging Face's `rotate_half`
//! form, applied to `[B, T, heads, hd]` (the layout a projection produces), as one node.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, D, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{slice, tensor, with_slice, zeros};

/// Per-(row, position) tables: `cos`/`sin` of shape [B, T, hd/2], row-major.
#[derive(Debug, Clone)]
pub(crate) struct RopeTables {
    pub(crate) cos: Arc<Vec<f32>>,
    pub(crate) sin: Arc<Vec<f32>>,
}

struct Rope {
    tables: RopeTables,
}

/// Rotate `x` [B, T, heads, hd] by `sign · θ` (sign −1 is the inverse: the backward).
fn rotate(x: &[f32], dims: (usize, usize, usize, usize), t: &RopeTables, sign: f32) -> Vec<f32> {
    let (_, _, heads, hd) = dims;
    let half = hd / 2;
    let mut y = zeros(x.len());
    let row = heads * hd;
    y.par_chunks_mut(row)
        .zip(x.par_chunks(row))
        .enumerate()
        .with_min_len(8)
        .for_each(|(bt, (y, x))| {
            let base = bt * half;
            let cos = &t.cos[base..base + half];
            let sin = &t.sin[base..base + half];
            for h in 0..heads {
                let x = &x[h * hd..(h + 1) * hd];
                let y = &mut y[h * hd..(h + 1) * hd];
                for i in 0..half {
                    let (c, s) = (cos[i], sign * sin[i]);
                    let (a, b) = (x[i], x[i + half]);
                    y[i] = a * c - b * s;
                    y[i + half] = b * c + a * s;
                }
            }
        });
    y
}

fn dims4(s: &Shape) -> candle_core::Result<(usize, usize, usize, usize)> {
    s.dims4()
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "fused-rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        let dims = dims4(l.shape())?;
        if self.tables.cos.len() != dims.0 * dims.1 * dims.3 / 2 {
            return Err(candle_core::Error::Msg("fused-rope: table shape".into()));
        }
        Ok((
            CpuStorage::F32(rotate(x, dims, &self.tables, 1.0)),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dims = dims4(arg.shape())?;
        let dx = with_slice(g, self.name(), |g| rotate(g, dims, &self.tables, -1.0))?;
        Ok(Some(tensor(dx, arg.dims())?))
    }
}

/// RoPE on an f32 CPU tensor `x` [B, T, heads, hd] with tables for [B, T].
pub(crate) fn rope(x: &Tensor, tables: &RopeTables) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(Rope {
        tables: tables.clone(),
    })
}

/// The composed twin of [`rope`] (differentiable candle ops; any device and dtype), in Hugging
/// Face's `rotate_half` form on the attention layout: x [B, heads, T, hd], cos/sin
/// [B, 1, T, hd/2].
pub(crate) fn rope_composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let hd = x.dim(D::Minus1)?;
    let half = hd / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?;
    let x2 = x.narrow(D::Minus1, half, half)?;
    let r1 = (x1.broadcast_mul(cos)? - x2.broadcast_mul(sin)?)?;
    let r2 = (x2.broadcast_mul(cos)? + x1.broadcast_mul(sin)?)?;
    Tensor::cat(&[&r1, &r2], D::Minus1)
}
