//! The attention mask and rotary tables of one forward call, built on the host from which keys
//! are real tokens.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};

use crate::config::ModelConfig;
use crate::device::compute_dtype;
use crate::ops::{HostMask, RopeTables};
use crate::{PolicyError, Result};

/// Additive mask value for disallowed keys: finite, so fully masked (padding) query rows give a
/// uniform softmax instead of NaN.
const MASK_VALUE: f32 = -1e9;

/// Rotary tables and the additive attention mask for one forward call.
///
/// Built on the host from which keys are real tokens, so left padding and a growing KV cache
/// share one code path.
#[derive(Debug, Clone)]
pub struct AttentionMask {
    /// [B, 1, T, head_dim/2]
    pub(super) cos: Tensor,
    /// [B, 1, T, head_dim/2]
    pub(super) sin: Tensor,
    /// [B, 1, 1, T, Tk], 0 where attending is allowed, -1e9 elsewhere.
    pub(super) bias: Tensor,
    /// The same tables on the host for the fused CPU kernels: cos/sin [B, T, head_dim/2].
    pub(super) rope: RopeTables,
    /// The same mask on the host, [B, T, Tk], with its key limits for every layer.
    pub(super) bias_host: HostMask,
}

impl AttentionMask {
    /// Mask and rotary tables for the last `q_len` of `Tk` key positions.
    ///
    /// `key_valid[b][k]` tells whether key position `k` of row `b` is a real token (`false` for
    /// padding); every row has the same length Tk (cache + new tokens). A query at key index `j`
    /// attends to keys `k <= j` that are valid; its RoPE position is the number of valid keys
    /// before it (so a left-padded row gets the same positions as the unpadded prompt).
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when rows differ in length or `q_len > Tk`.
    pub fn new(
        key_valid: &[Vec<bool>],
        q_len: usize,
        cfg: &ModelConfig,
        device: &Device,
    ) -> Result<Self> {
        let b = key_valid.len();
        let tk = key_valid.first().map_or(0, Vec::len);
        if b == 0 || q_len == 0 || q_len > tk || key_valid.iter().any(|r| r.len() != tk) {
            return Err(PolicyError::arg(
                "key_valid",
                format!("need B > 0 rows of equal length >= q_len {q_len}"),
            ));
        }
        let half = cfg.head_dim() / 2;
        let mut positions = Vec::with_capacity(b * q_len);
        let mut bias = Vec::with_capacity(b * q_len * tk);
        for row in key_valid {
            let mut before = vec![0u32; tk];
            let mut count = 0u32;
            for (k, &v) in row.iter().enumerate() {
                before[k] = count;
                count += u32::from(v);
            }
            for i in 0..q_len {
                let j = tk - q_len + i;
                positions.push(before[j]);
                bias.extend(
                    row.iter()
                        .enumerate()
                        .map(|(k, &v)| if k <= j && v { 0.0 } else { MASK_VALUE }),
                );
            }
        }
        let (cos, sin) = rope_cos_sin(cfg, &positions);
        let dtype = compute_dtype(device);
        Ok(Self {
            cos: Tensor::from_slice(&cos, (b, 1, q_len, half), device)?.to_dtype(dtype)?,
            sin: Tensor::from_slice(&sin, (b, 1, q_len, half), device)?.to_dtype(dtype)?,
            bias: Tensor::from_slice(&bias, (b, 1, 1, q_len, tk), device)?,
            rope: RopeTables {
                cos: Arc::new(cos),
                sin: Arc::new(sin),
            },
            bias_host: HostMask::new(bias, tk),
        })
    }

    /// The same mask with its rotary tables in `dtype` (free when they already are).
    pub(super) fn with_table_dtype(&self, dtype: DType) -> Result<Self> {
        Ok(Self {
            cos: self.cos.to_dtype(dtype)?,
            sin: self.sin.to_dtype(dtype)?,
            bias: self.bias.clone(),
            rope: self.rope.clone(),
            bias_host: self.bias_host.clone(),
        })
    }
}

/// RoPE `cos` and `sin` tables `[positions, head_dim/2]` of the given absolute positions.
pub(crate) fn rope_cos_sin(cfg: &ModelConfig, positions: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let half = cfg.head_dim() / 2;
    // inv_freq[i] = θ^(-2i/hd), computed in f32 like the Hugging Face reference.
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / (cfg.rope_theta as f32).powf((2 * i) as f32 / cfg.head_dim() as f32))
        .collect();
    let mut cos = Vec::with_capacity(positions.len() * half);
    let mut sin = Vec::with_capacity(positions.len() * half);
    for &p in positions {
        let pos = p as f32;
        for f in &inv_freq {
            let angle = pos * f;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}
