//! SwiGLU `silu(gate) · up` (Shazeer 2020, arXiv 2002.05202) as one node.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{slice, tensor, with_slice, zeros};

struct SwiGlu;

const CHUNK: usize = 1 << 14;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "fused-swiglu"
    }

    fn cpu_fwd(
        &self,
        gs: &CpuStorage,
        gl: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = slice(gs, gl, self.name())?;
        let u = slice(us, ul, self.name())?;
        if g.len() != u.len() {
            return Err(candle_core::Error::Msg(
                "fused-swiglu: shape mismatch".into(),
            ));
        }
        let mut y = zeros(g.len());
        y.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
            .for_each(|(y, (g, u))| {
                for i in 0..y.len() {
                    y[i] = g[i] * sigmoid(g[i]) * u[i];
                }
            });
        Ok((CpuStorage::F32(y), gl.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dg, du) = with_slice(gate, self.name(), |g| {
            with_slice(up, self.name(), |u| {
                with_slice(dy, self.name(), |dy| {
                    let mut dg = zeros(g.len());
                    let mut du = zeros(g.len());
                    dg.par_chunks_mut(CHUNK)
                        .zip(du.par_chunks_mut(CHUNK))
                        .enumerate()
                        .for_each(|(c, (dg, du))| {
                            let o = c * CHUNK;
                            for i in 0..dg.len() {
                                let (x, s) = (g[o + i], sigmoid(g[o + i]));
                                du[i] = dy[o + i] * x * s;
                                // d silu / dx = s · (1 + x · (1 − s))
                                dg[i] = dy[o + i] * u[o + i] * s * (1.0 + x * (1.0 - s));
                            }
                        });
                    (dg, du)
                })
            })
        })???;
        Ok((Some(tensor(dg, gate.dims())?), Some(tensor(du, up.dims())?)))
    }
}

/// `silu(gate) · up` for f32 CPU tensors of one shape.
pub(crate) fn swiglu(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    gate.contiguous()?.apply_op2(&up.contiguous()?, SwiGlu)
}
