//! Device and dtype choice: f32 on CPU; bf16 compute with f32 master weights and f32 reductions
//! under the `cuda` cargo feature.

use candle_core::{DType, Device};

use crate::Result;

/// The device models are created on: CUDA device 0 with the `cuda` feature, else the CPU.
///
/// # Errors
/// With `cuda`, fails when no CUDA device can be opened.
pub fn default_device() -> Result<Device> {
    #[cfg(feature = "cuda")]
    {
        Ok(Device::new_cuda(0)?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(Device::Cpu)
    }
}

/// The dtype matrix multiplications run in on `device`: bf16 on CUDA, f32 elsewhere.
///
/// Master weights, optimiser moments, RMSNorm and softmax reductions and all log-probs stay in f32
/// whatever this returns (bf16 on CPU is slower and flips greedy tokens: `shared/spec/candle.md` §8).
pub fn compute_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    }
}
