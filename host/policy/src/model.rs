//! The decoder-only transformer of the Llama and Qwen2 families, written for training.
//!
//! Every op is differentiable (no `apply_op*_no_bwd` kernels, which candle-core `custom_op.rs` gives no backward):
//! RMSNorm from `sqr/mean/sqrt/recip`, RoPE by `rotate_half` with per-row positions, grouped-query
//! attention without repeating K/V, softmax with a detached max, an additive finite mask (causal +
//! left padding), SwiGLU. The lm_head is applied only to the hidden states the caller selects.

mod recompute;

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{D, DType, Device, Tensor};

use crate::config::ModelConfig;
use crate::device::compute_dtype;
use crate::lora::{LoraAdapter, frozen_matmul, lora_matmul, supports_fused_ops};
use crate::ops::{self, RopeTables};
use crate::{PolicyError, Result};

/// Named weight tensors with Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
pub type Weights = HashMap<String, Tensor>;

/// Additive mask value for disallowed keys: finite, so fully masked (padding) query rows give a
/// uniform softmax instead of NaN.
const MASK_VALUE: f32 = -1e9;

/// A linear projection `y = x Wᵀ (+ b) (+ scale · x Aᵀ Bᵀ)`.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    /// [out, in]
    pub(crate) weight: Tensor,
    /// [out]
    pub(crate) bias: Option<Tensor>,
    pub(crate) lora: Option<LoraAdapter>,
    /// The base weight is constant: use the frozen matmul so its gradient is never computed.
    pub(crate) frozen_base: bool,
}

impl Linear {
    /// x: [..., in] -> [..., out]
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let in_dim = *dims
            .last()
            .ok_or_else(|| PolicyError::arg("x", "scalar input to linear"))?;
        let n = x.elem_count() / in_dim;
        let x2 = x.reshape((n, in_dim))?;
        let w = self.weight.to_dtype(x.dtype())?;
        let adapters = self
            .lora
            .as_ref()
            .map(|l| {
                Ok::<_, PolicyError>((l.a.to_dtype(x.dtype())?, l.b.to_dtype(x.dtype())?, l.scale))
            })
            .transpose()?;
        let mut y = match &adapters {
            // Frozen base + adapters in a training graph: one fused node (CPU and CUDA).
            Some((a, b, scale))
                if self.frozen_base
                    && supports_fused_ops(x2.device())
                    && (x2.track_op() || a.track_op() || b.track_op()) =>
            {
                lora_matmul(&x2, &w, a, b, *scale)?
            }
            _ => {
                let mut y = if self.frozen_base && x2.track_op() {
                    frozen_matmul(&x2, &w)?
                } else {
                    x2.matmul(&w.t()?)?
                };
                if let Some((a, b, scale)) = &adapters {
                    let delta = x2.matmul(&a.t()?)?.matmul(&b.t()?)?.affine(*scale, 0.0)?;
                    y = (y + delta)?;
                }
                y
            }
        };
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&b.to_dtype(y.dtype())?)?;
        }
        let mut out_dims = dims;
        *out_dims.last_mut().unwrap() = self.weight.dim(0)?;
        Ok(y.reshape(out_dims)?)
    }

    fn map(&self, f: &impl Fn(&Tensor) -> Result<Tensor>) -> Result<Self> {
        Ok(Self {
            weight: f(&self.weight)?,
            bias: self.bias.as_ref().map(f).transpose()?,
            lora: match &self.lora {
                Some(l) => Some(LoraAdapter {
                    a: f(&l.a)?,
                    b: f(&l.b)?,
                    scale: l.scale,
                }),
                None => None,
            },
            frozen_base: self.frozen_base,
        })
    }

    /// `W + scale · B A`, shape [out, in] (the weight a Hugging Face checkpoint should hold).
    fn merged_weight(&self) -> Result<Tensor> {
        match &self.lora {
            None => Ok(self.weight.detach()),
            Some(l) => Ok((self.weight.detach()
                + l.b.detach().matmul(&l.a.detach())?.affine(l.scale, 0.0)?)?),
        }
    }
}

/// Where [`LlamaModel::new`] takes its tensors from.
pub struct ModelParts<'a> {
    /// Base weights by Hugging Face name; Var-backed tensors train, plain tensors stay constant.
    pub weights: &'a Weights,
    /// LoRA adapters keyed by module path (`model.layers.0.self_attn.q_proj`).
    pub adapters: &'a HashMap<String, LoraAdapter>,
    /// Whether base weights are constants (LoRA, reference policy): enables the frozen matmul.
    pub frozen_base: bool,
}

impl ModelParts<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = self
            .weights
            .get(name)
            .ok_or_else(|| PolicyError::MissingTensor {
                name: name.to_string(),
            })?;
        if t.dims() != shape {
            return Err(PolicyError::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: t.dims().to_vec(),
            });
        }
        Ok(t.clone())
    }

    fn linear(&self, path: &str, in_dim: usize, out_dim: usize, bias: bool) -> Result<Linear> {
        Ok(Linear {
            weight: self.get(&format!("{path}.weight"), &[out_dim, in_dim])?,
            bias: if bias {
                Some(self.get(&format!("{path}.bias"), &[out_dim])?)
            } else {
                None
            },
            lora: self.adapters.get(path).cloned(),
            frozen_base: self.frozen_base,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    pub(crate) input_layernorm: Tensor,
    pub(crate) post_attention_layernorm: Tensor,
    pub(crate) q_proj: Linear,
    pub(crate) k_proj: Linear,
    pub(crate) v_proj: Linear,
    pub(crate) o_proj: Linear,
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
}

/// The Hugging Face module paths of a layer's projections, in a fixed order.
pub(crate) fn layer_projection_paths(i: usize) -> [(String, &'static str); 7] {
    let p = format!("model.layers.{i}");
    [
        (format!("{p}.self_attn.q_proj"), "q_proj"),
        (format!("{p}.self_attn.k_proj"), "k_proj"),
        (format!("{p}.self_attn.v_proj"), "v_proj"),
        (format!("{p}.self_attn.o_proj"), "o_proj"),
        (format!("{p}.mlp.gate_proj"), "gate_proj"),
        (format!("{p}.mlp.up_proj"), "up_proj"),
        (format!("{p}.mlp.down_proj"), "down_proj"),
    ]
}

impl DecoderLayer {
    /// Every tensor of the layer (norms, weights, biases, adapters) in a fixed order.
    pub(crate) fn tensors_mut(&mut self) -> Vec<&mut Tensor> {
        let mut out = vec![
            &mut self.input_layernorm,
            &mut self.post_attention_layernorm,
        ];
        for lin in [
            &mut self.q_proj,
            &mut self.k_proj,
            &mut self.v_proj,
            &mut self.o_proj,
            &mut self.gate_proj,
            &mut self.up_proj,
            &mut self.down_proj,
        ] {
            out.push(&mut lin.weight);
            if let Some(b) = &mut lin.bias {
                out.push(b);
            }
            if let Some(l) = &mut lin.lora {
                out.push(&mut l.a);
                out.push(&mut l.b);
            }
        }
        out
    }

    fn projections(&self) -> [&Linear; 7] {
        [
            &self.q_proj,
            &self.k_proj,
            &self.v_proj,
            &self.o_proj,
            &self.gate_proj,
            &self.up_proj,
            &self.down_proj,
        ]
    }
}

/// Rotary tables and the additive attention mask for one forward call.
///
/// Built on the host from which keys are real tokens, so left padding and a growing KV cache
/// share one code path.
#[derive(Debug, Clone)]
pub struct AttentionMask {
    /// [B, 1, T, head_dim/2]
    cos: Tensor,
    /// [B, 1, T, head_dim/2]
    sin: Tensor,
    /// [B, 1, 1, T, Tk], 0 where attending is allowed, -1e9 elsewhere.
    bias: Tensor,
    /// The same tables on the host for the fused CPU kernels: cos/sin [B, T, head_dim/2].
    rope: RopeTables,
    /// The same mask on the host: [B, T, Tk].
    bias_host: Arc<Vec<f32>>,
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
            bias_host: Arc::new(bias),
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

impl AttentionMask {
    /// The same mask with its rotary tables in `dtype` (free when they already are).
    fn with_table_dtype(&self, dtype: DType) -> Result<Self> {
        Ok(Self {
            cos: self.cos.to_dtype(dtype)?,
            sin: self.sin.to_dtype(dtype)?,
            bias: self.bias.clone(),
            rope: self.rope.clone(),
            bias_host: self.bias_host.clone(),
        })
    }
}

/// Per-layer key/value cache for sampling: `k`, `v` of shape [B, Tk, KV, head_dim] (the fused
/// CPU kernels' layout) or [B, KV, Tk, head_dim] (the composed ops' layout).
///
/// Prefix sharing (issue #10, item 3) would add a shared, read-only prefix block here (one
/// `(k, v)` per layer at batch 1, prefilled once per group) next to the per-row blocks; the
/// fused attention reads keys block by block, so only the mask and that loop need to learn it.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// The key-position dimension of the cached tensors (1 fused, 2 composed).
    seq_dim: usize,
}

impl KvCache {
    /// An empty cache for `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            seq_dim: 1,
        }
    }

    /// Cached key positions Tk (0 when empty).
    pub fn seq_len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.dim(self.seq_dim).unwrap_or(0))
    }

    /// Append the rows of `other` (same layers and key length) after this cache's rows; an
    /// empty cache takes `other` as it is.
    ///
    /// # Errors
    /// Fails when layer counts or shapes differ.
    pub fn append_rows(&mut self, other: KvCache) -> Result<()> {
        if self.layers.iter().all(Option::is_none) {
            *self = other;
            return Ok(());
        }
        if other.layers.len() != self.layers.len() {
            return Err(PolicyError::arg("cache", "different layer counts"));
        }
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (Some((k, v)), Some((k2, v2))) => {
                    Some((Tensor::cat(&[&k, &k2], 0)?, Tensor::cat(&[&v, &v2], 0)?))
                }
                (a, b) => a.or(b),
            };
        }
        Ok(())
    }

    /// Keep only the given batch rows (in this order), e.g. to drop finished sequences.
    ///
    /// # Errors
    /// Fails when an index is out of range.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        for (k, v) in self.layers.iter_mut().flatten() {
            let idx = Tensor::new(rows, k.device())?;
            *k = k.index_select(&idx, 0)?;
            *v = v.index_select(&idx, 0)?;
        }
        Ok(())
    }
}

/// A Llama/Qwen2 decoder with its embedding and lm_head.
///
/// Weights are shared tensors: cloning is cheap, [`LlamaModel::detached`] gives a view of the same
/// storage without autograd (for sampling), [`LlamaModel::deep_copy`] an independent frozen copy
/// (for the reference policy).
#[derive(Debug, Clone)]
pub struct LlamaModel {
    cfg: ModelConfig,
    /// [V, D]
    pub(crate) embed_tokens: Tensor,
    pub(crate) layers: Vec<DecoderLayer>,
    /// [D]
    pub(crate) norm: Tensor,
    /// [V, D]; `None` when tied to `embed_tokens`.
    lm_head: Option<Tensor>,
    frozen_base: bool,
    dtype: DType,
    /// Use the fused CPU kernels ([`crate::ops`]) where they apply (f32 on the CPU).
    fused: bool,
    /// Keep only each layer's input during training and recompute the layer in the backward
    /// ([`recompute`]).
    gradient_checkpointing: bool,
}

impl LlamaModel {
    /// Build the model from named tensors (Hugging Face names) and optional LoRA adapters.
    ///
    /// # Errors
    /// [`PolicyError::MissingTensor`] / [`PolicyError::ShapeMismatch`] naming the tensor.
    pub fn new(cfg: &ModelConfig, parts: &ModelParts<'_>) -> Result<Self> {
        let d = cfg.hidden_size;
        let hd = cfg.head_dim();
        let q_out = cfg.num_attention_heads * hd;
        let kv_out = cfg.num_kv_heads() * hd;
        let f = cfg.intermediate_size;
        let embed_tokens = parts.get("model.embed_tokens.weight", &[cfg.vocab_size, d])?;
        let device = embed_tokens.device().clone();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let attn = format!("{p}.self_attn");
            let mlp = format!("{p}.mlp");
            layers.push(DecoderLayer {
                input_layernorm: parts.get(&format!("{p}.input_layernorm.weight"), &[d])?,
                post_attention_layernorm: parts
                    .get(&format!("{p}.post_attention_layernorm.weight"), &[d])?,
                q_proj: parts.linear(&format!("{attn}.q_proj"), d, q_out, cfg.qkv_bias())?,
                k_proj: parts.linear(&format!("{attn}.k_proj"), d, kv_out, cfg.qkv_bias())?,
                v_proj: parts.linear(&format!("{attn}.v_proj"), d, kv_out, cfg.qkv_bias())?,
                o_proj: parts.linear(&format!("{attn}.o_proj"), q_out, d, cfg.o_bias())?,
                gate_proj: parts.linear(&format!("{mlp}.gate_proj"), d, f, false)?,
                up_proj: parts.linear(&format!("{mlp}.up_proj"), d, f, false)?,
                down_proj: parts.linear(&format!("{mlp}.down_proj"), f, d, false)?,
            });
        }
        let norm = parts.get("model.norm.weight", &[d])?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(parts.get("lm_head.weight", &[cfg.vocab_size, d])?)
        };
        Ok(Self {
            cfg: cfg.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
            frozen_base: parts.frozen_base,
            dtype: compute_dtype(&device),
            fused: true,
            gradient_checkpointing: false,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        self.embed_tokens.device()
    }

    fn map(&self, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Self> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            layers.push(DecoderLayer {
                input_layernorm: f(&l.input_layernorm)?,
                post_attention_layernorm: f(&l.post_attention_layernorm)?,
                q_proj: l.q_proj.map(&f)?,
                k_proj: l.k_proj.map(&f)?,
                v_proj: l.v_proj.map(&f)?,
                o_proj: l.o_proj.map(&f)?,
                gate_proj: l.gate_proj.map(&f)?,
                up_proj: l.up_proj.map(&f)?,
                down_proj: l.down_proj.map(&f)?,
            });
        }
        Ok(Self {
            cfg: self.cfg.clone(),
            embed_tokens: f(&self.embed_tokens)?,
            layers,
            norm: f(&self.norm)?,
            lm_head: self.lm_head.as_ref().map(&f).transpose()?,
            frozen_base: self.frozen_base,
            dtype: self.dtype,
            fused: self.fused,
            gradient_checkpointing: self.gradient_checkpointing,
        })
    }

    /// The dtype matrix multiplications run in: [`crate::compute_dtype`] of the device unless
    /// set with [`LlamaModel::with_compute_dtype`]. Reductions and outputs stay f32.
    pub fn compute_dtype(&self) -> DType {
        self.dtype
    }

    /// The same weights (shared) computing in `dtype`, e.g. f32 on CUDA for a reference forward
    /// or bf16 on the CPU to test the GPU's precision. Master weights are not converted.
    pub fn with_compute_dtype(&self, dtype: DType) -> Self {
        let mut m = self.clone();
        m.dtype = dtype;
        m
    }

    /// A detached model for inference whose matrices are stored in the compute dtype, so a bf16
    /// forward does not convert every f32 master weight again at each decode step. In f32 it
    /// shares the weights (no copy); in bf16 it does not see later optimiser steps.
    ///
    /// # Errors
    /// Allocation failures.
    pub fn inference_view(&self) -> Result<Self> {
        let dtype = self.dtype;
        self.map(|t| {
            let t = t.detach();
            Ok(if t.rank() >= 2 { t.to_dtype(dtype)? } else { t })
        })
    }

    /// A view of the same weights without autograd: sees optimiser updates (in-place `Var::set`)
    /// but never records a graph. Use it for sampling, so the KV cache keeps no graph alive.
    pub fn detached(&self) -> Self {
        // `detach` cannot fail.
        self.map(|t| Ok(t.detach())).expect("detach is infallible")
    }

    /// An independent copy of the current weights without autograd (the frozen reference policy).
    ///
    /// # Errors
    /// Fails only on allocation errors.
    pub fn deep_copy(&self) -> Result<Self> {
        let mut m = self.map(|t| Ok(t.detach().copy()?))?;
        m.frozen_base = true;
        Ok(m)
    }

    /// Current weights under Hugging Face names, LoRA merged in (`W + scale · B A`), detached.
    pub fn hf_weights(&self) -> Result<Weights> {
        let mut w = Weights::new();
        w.insert(
            "model.embed_tokens.weight".into(),
            self.embed_tokens.detach(),
        );
        w.insert("model.norm.weight".into(), self.norm.detach());
        if let Some(h) = &self.lm_head {
            w.insert("lm_head.weight".into(), h.detach());
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            w.insert(
                format!("{p}.input_layernorm.weight"),
                l.input_layernorm.detach(),
            );
            w.insert(
                format!("{p}.post_attention_layernorm.weight"),
                l.post_attention_layernorm.detach(),
            );
            for ((path, _), lin) in layer_projection_paths(i).iter().zip(l.projections()) {
                w.insert(format!("{path}.weight"), lin.merged_weight()?);
                if let Some(b) = &lin.bias {
                    w.insert(format!("{path}.bias"), b.detach());
                }
            }
        }
        Ok(w)
    }

    /// The same weights with the frozen-weight matmul switched on or off (tests compare both).
    #[cfg(test)]
    pub(crate) fn with_frozen_base(&self, frozen: bool) -> Self {
        let mut m = self.clone();
        for l in &mut m.layers {
            for lin in [
                &mut l.q_proj,
                &mut l.k_proj,
                &mut l.v_proj,
                &mut l.o_proj,
                &mut l.gate_proj,
                &mut l.up_proj,
                &mut l.down_proj,
            ] {
                lin.frozen_base = frozen;
            }
        }
        m.frozen_base = frozen;
        m
    }

    /// The same weights with the fused CPU kernels switched on or off (tests compare both).
    #[cfg(test)]
    pub(crate) fn with_fused(&self, fused: bool) -> Self {
        let mut m = self.clone();
        m.fused = fused;
        m
    }

    /// The same model with activation (gradient) checkpointing switched on or off: when on, a
    /// training forward keeps only each decoder layer's input and the backward recomputes the
    /// layer (Chen et al. 2016, arXiv 1604.06174), trading one more forward for the activation
    /// memory of all layers but one. Gradients are unchanged. f32 on the CPU only; elsewhere it is ignored.
    pub fn with_gradient_checkpointing(&self, on: bool) -> Self {
        let mut m = self.clone();
        m.gradient_checkpointing = on;
        m
    }

    /// Whether activation checkpointing is on.
    pub fn gradient_checkpointing(&self) -> bool {
        self.gradient_checkpointing
    }

    /// Whether sampling may use the packed forward over cached segments ([`crate::packed`]):
    /// the fused kernels on the CPU in f32.
    pub(crate) fn packs(&self) -> bool {
        self.fused
            && self.dtype == DType::F32
            && ops::fusable(&self.embed_tokens)
            && ops::fusable(self.lm_head_weight())
    }

    /// Whether this call runs the fused CPU kernels.
    fn fuse(&self, x: &Tensor) -> bool {
        self.fused && ops::fusable(x)
    }

    /// The lm_head weight [V, D] (the embedding when tied).
    pub(crate) fn lm_head_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Whether [`crate::score`] may use the fused log-prob kernel for `hidden`.
    pub(crate) fn fuse_logprobs(&self, hidden: &Tensor) -> bool {
        self.fuse(hidden) && ops::fusable(self.lm_head_weight())
    }

    /// The same model with every LoRA adapter removed (base weights only, shared storage).
    pub fn without_adapters(&self) -> Self {
        let mut m = self.detached();
        for l in &mut m.layers {
            for lin in [
                &mut l.q_proj,
                &mut l.k_proj,
                &mut l.v_proj,
                &mut l.o_proj,
                &mut l.gate_proj,
                &mut l.up_proj,
                &mut l.down_proj,
            ] {
                lin.lora = None;
            }
        }
        m.frozen_base = true;
        m
    }

    /// Final hidden states after the last RMSNorm.
    ///
    /// * `input_ids`: [B, T] u32, the new tokens (T = all tokens without a cache, 1 per decode step).
    /// * `mask`: built by [`AttentionMask::new`] for these T queries over cache + new keys.
    /// * `cache`: appended to when given.
    ///
    /// Returns [B, T, D] in f32.
    ///
    /// # Errors
    /// Shape mismatches between ids, mask and cache.
    pub fn forward_hidden(
        &self,
        input_ids: &Tensor,
        mask: &AttentionMask,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        let mask = &mask.with_table_dtype(self.dtype)?;
        let mut x = self
            .embed_tokens
            .index_select(&input_ids.flatten_all()?, 0)?
            .reshape((b, t, self.cfg.hidden_size))?
            .to_dtype(self.dtype)?;
        if let Some(c) = cache.as_deref_mut() {
            if c.layers.len() != self.layers.len() {
                *c = KvCache::new(self.layers.len());
            }
            c.seq_dim = if self.fuse(&x) { 1 } else { 2 };
        }
        for (i, layer) in self.layers.iter().enumerate() {
            if self.gradient_checkpointing && cache.is_none() && ops::fusable(&x) {
                x = recompute::checkpointed_layer(self, i, &x, mask)?;
                continue;
            }
            let slot = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            x = self.layer_forward(layer, &x, mask, slot)?;
        }
        self.rms_norm(&x, &self.norm)
    }

    /// RMSNorm in f32 (fused on the CPU).
    fn rms_norm(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        if self.fuse(x) && ops::fusable(w) {
            return Ok(ops::rms_norm(x, w, self.cfg.rms_norm_eps)?);
        }
        rms_norm(x, w, self.cfg.rms_norm_eps)
    }

    /// Logits of selected hidden states: [N, D] -> [N, V] in f32 (tied or untied lm_head).
    ///
    /// # Errors
    /// Shape mismatch.
    pub fn lm_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let w = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        let head = Linear {
            weight: w.clone(),
            bias: None,
            lora: None,
            frozen_base: self.frozen_base,
        };
        Ok(head
            .forward(&hidden.to_dtype(self.dtype)?)?
            .to_dtype(DType::F32)?)
    }

    /// Layer `i`.
    pub(crate) fn layer(&self, i: usize) -> &DecoderLayer {
        &self.layers[i]
    }

    pub(crate) fn layer_forward(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        mask: &AttentionMask,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> Result<Tensor> {
        let h = self.rms_norm(x, &l.input_layernorm)?.to_dtype(self.dtype)?;
        let attn = self.attention(l, &h, mask, cache)?;
        let x = (x + attn)?;
        let h = self
            .rms_norm(&x, &l.post_attention_layernorm)?
            .to_dtype(self.dtype)?;
        let gate = l.gate_proj.forward(&h)?;
        let up = l.up_proj.forward(&h)?;
        let act = if self.fuse(&gate) {
            ops::swiglu(&gate, &up)?
        } else {
            (gate.silu()? * up)?
        };
        let mlp = l.down_proj.forward(&act)?;
        Ok((x + mlp)?)
    }

    /// x: [B, T, D] -> [B, T, D]
    fn attention(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        mask: &AttentionMask,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let h = self.cfg.num_attention_heads;
        let kv = self.cfg.num_kv_heads();
        let hd = self.cfg.head_dim();
        let rep = h / kv;
        if self.fuse(x) {
            // [B, T, heads·hd] is already [B, T, heads, hd]: no transposes.
            let q = ops::rope(&l.q_proj.forward(x)?.reshape((b, t, h, hd))?, &mask.rope)?;
            let k = ops::rope(&l.k_proj.forward(x)?.reshape((b, t, kv, hd))?, &mask.rope)?;
            let v = l.v_proj.forward(x)?.reshape((b, t, kv, hd))?;
            let (k, v) = match cache {
                Some(slot) => {
                    let (k, v) = match slot.take() {
                        Some((pk, pv)) => {
                            (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, &v], 1)?)
                        }
                        None => (k, v),
                    };
                    *slot = Some((k.clone(), v.clone()));
                    (k, v)
                }
                None => (k, v),
            };
            let out = ops::attention(&q, &k, &v, &mask.bias_host, 1.0 / (hd as f64).sqrt())?;
            return l.o_proj.forward(&out);
        }
        // [B, T, H*hd] -> [B, H, T, hd]
        let q = l
            .q_proj
            .forward(x)?
            .reshape((b, t, h, hd))?
            .transpose(1, 2)?;
        let k = l
            .k_proj
            .forward(x)?
            .reshape((b, t, kv, hd))?
            .transpose(1, 2)?;
        let v = l
            .v_proj
            .forward(x)?
            .reshape((b, t, kv, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let q = rope(&q, &mask.cos, &mask.sin)?;
        let k = rope(&k, &mask.cos, &mask.sin)?;
        let (k, v) = match cache {
            Some(slot) => {
                let (k, v) = match slot.take() {
                    Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 2)?, Tensor::cat(&[&pv, &v], 2)?),
                    None => (k, v),
                };
                *slot = Some((k.clone(), v.clone()));
                (k, v)
            }
            None => (k, v),
        };
        let out = sdpa(&q, &k, &v, &mask.bias, rep, self.dtype)?;
        l.o_proj.forward(&out)
    }
}

/// Grouped-query attention from composed candle ops: q [B, H, T, hd], k/v [B, KV, Tk, hd],
/// additive mask [B, 1, 1, T, Tk]; returns [B, T, H·hd]. Scores and softmax in f32.
pub(crate) fn sdpa(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    rep: usize,
    dtype: DType,
) -> Result<Tensor> {
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
    Ok(out
        .reshape((b, h, t, hd))?
        .transpose(1, 2)?
        .reshape((b, t, h * hd))?)
}

/// RMSNorm in f32: `x / sqrt(mean(x²) + eps) * w`; [.., D] -> [.., D] f32.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (ms + eps)?.sqrt()?.recip()?;
    Ok(x.broadcast_mul(&inv)?
        .broadcast_mul(&w.to_dtype(DType::F32)?)?)
}

/// Hugging Face `rotate_half` RoPE. x: [B, heads, T, hd], cos/sin: [B, 1, T, hd/2].
pub(crate) fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let hd = x.dim(D::Minus1)?;
    let half = hd / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?;
    let x2 = x.narrow(D::Minus1, half, half)?;
    let r1 = (x1.broadcast_mul(cos)? - x2.broadcast_mul(sin)?)?;
    let r2 = (x2.broadcast_mul(cos)? + x1.broadcast_mul(sin)?)?;
    Ok(Tensor::cat(&[&r1, &r2], D::Minus1)?)
}

/// Softmax over the last dim with a detached max (the backward skips the max reduce).
pub(crate) fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    let s = e.sum_keepdim(D::Minus1)?;
    Ok(e.broadcast_div(&s)?)
}
