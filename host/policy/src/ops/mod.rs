//! Fused CPU kernels for training and sampling in f32, each a candle custom op with a
//! hand-written backward: fewer graph nodes, fewer full-size temporaries and no transposes.
//! Beside each fused op, in the same file, sits its composed twin (`*_composed`: differentiable
//! candle ops) that the tests compare it with, and that runs on other devices and dtypes.
//!
//! - [`rms_norm`]: RMSNorm forward/backward in one pass per row.
//! - [`swiglu`]: `silu(gate) · up`.
//! - [`rope`]: rotary embedding on the `[B, T, heads, hd]` projection layout.
//! - [`attention`]: grouped-query attention with an additive mask, read straight from the
//!   projection layouts, softmax recomputed in the backward (no `[B, H, T, Tk]` tensor is kept).
//! - [`chain_attention`]: sampling's attention of new tokens over chains of cached key/value
//!   blocks read in place (shared prefixes, per-trajectory caches; no backward).
//! - [`token_logprobs`]: lm_head + log-softmax + entropy at the scored positions only, in row
//!   chunks, so the `[N, V]` logits never exist whole.

mod attention;
mod chain_attention;
mod gemm;
mod logprob;
mod norm;
mod rope;
mod swiglu;

pub(crate) use attention::{HostMask, attention, computed_pairs, sdpa_composed};
pub(crate) use chain_attention::{ChainQuery, Heads, KvBlock, chain_attention};
pub(crate) use logprob::token_logprobs;
pub(crate) use norm::{rms_norm, rms_norm_composed};
pub(crate) use rope::{RopeTables, rope, rope_composed};
pub(crate) use swiglu::swiglu;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Storage, Tensor};

/// Whether the fused kernels apply: contiguous-able f32 tensors on the CPU.
pub(crate) fn fusable(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
}

/// The contiguous f32 slice of a custom op's CPU argument.
pub(crate) fn slice<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &'static str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else {
        return Err(candle_core::Error::UnsupportedDTypeForOp(s.dtype(), op));
    };
    let (a, b) = l
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: argument is not contiguous")))?;
    Ok(&v[a..b])
}

/// Run `f` on the contiguous f32 data of a CPU tensor (copies only when it is strided).
pub(crate) fn with_slice<R>(
    t: &Tensor,
    op: &'static str,
    f: impl FnOnce(&[f32]) -> R,
) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(candle_core::Error::Msg(format!("{op}: not a CPU tensor")));
    };
    Ok(f(slice(cpu, layout, op)?))
}

/// A fresh CPU f32 tensor from a vector (no copy).
pub(crate) fn tensor(v: Vec<f32>, shape: &[usize]) -> candle_core::Result<Tensor> {
    Tensor::from_vec(v, shape, &candle_core::Device::Cpu)
}

/// An uninitialised-looking but zeroed output buffer; large buffers come back from the
/// allocator's free lists when it keeps pages (see [`crate::cpu::tune_allocator`]).
pub(crate) fn zeros(n: usize) -> Vec<f32> {
    vec![0.0; n]
}

#[cfg(test)]
mod tests;
