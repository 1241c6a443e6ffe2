//! The decoder-only transformer of the Llama and Qwen2 families, written for training.
//!
//! Every op is differentiable (no `apply_op*_no_bwd` kernels, which candle-core `custom_op.rs`
//! gives no backward): RMSNorm, RoPE by `rotate_half` with per-row positions, grouped-query
//! attention without repeating K/V, softmax with a detached max, an additive finite mask (causal +
//! left padding), SwiGLU; in f32 on the CPU as the fused kernels of `ops/` (hand-written
//! backwards), elsewhere as their composed twins beside them. The lm_head is applied only to the
//! hidden states the caller selects.
//!
//! - `model.rs` (this file): [`LlamaModel`], the embedding, the layers, the final norm and the
//!   lm_head, and the views of the same weights (detached, frozen copy, compute dtype, without
//!   adapters).
//! - `model/linear.rs`: a projection with its LoRA adapter, and [`ModelParts`] (weights by name).
//! - `model/layer.rs`: one decoder block and its attention, fused or composed.
//! - `model/mask.rs`: the [`AttentionMask`] and rotary tables of one forward call.
//! - `model/kv_cache.rs`: the per-layer [`KvCache`] of padded sampling.
//! - `model/recompute.rs`: activation checkpointing of a layer.
//! - `model/shared.rs`: the training forward over a batch's prefix tree (shared-prefix training).

mod kv_cache;
mod layer;
mod linear;
mod mask;
mod recompute;
mod shared;

pub use kv_cache::KvCache;
pub(crate) use layer::{DecoderLayer, layer_projection_paths, projection_shapes};
use linear::Layout;
pub(crate) use linear::Linear;
pub use linear::{ModelParts, Weights};
pub use mask::AttentionMask;
pub(crate) use mask::rope_cos_sin;

use candle_core::{DType, Device, Tensor};

use crate::Result;
use crate::config::ModelConfig;
use crate::device::compute_dtype;
use crate::ops;

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
    /// The lm_head for [`LlamaModel::lm_logits`] only, stored column-major
    /// ([`LlamaModel::for_sampling`]); the fused log-prob kernel keeps reading `lm_head`.
    sampling_head: Option<Tensor>,
    frozen_base: bool,
    dtype: DType,
    /// Use the fused CPU kernels ([`crate::ops`]) where they apply (f32 on the CPU).
    fused: bool,
    /// Keep only each layer's input during training and recompute the layer in the backward
    /// ([`recompute`]).
    gradient_checkpointing: bool,
    /// Score batches over their prefix tree ([`crate::shared_prefix`]) where it applies.
    shared_prefixes: bool,
}

impl LlamaModel {
    /// Build the model from named tensors (Hugging Face names) and optional LoRA adapters.
    ///
    /// # Errors
    /// [`crate::PolicyError::MissingTensor`] / [`crate::PolicyError::ShapeMismatch`] naming the
    /// tensor.
    pub fn new(cfg: &ModelConfig, parts: &ModelParts<'_>) -> Result<Self> {
        let d = cfg.hidden_size;
        let embed_tokens = parts.get("model.embed_tokens.weight", &[cfg.vocab_size, d])?;
        let device = embed_tokens.device().clone();
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::load(parts, cfg, i))
            .collect::<Result<Vec<_>>>()?;
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
            sampling_head: None,
            frozen_base: parts.frozen_base,
            dtype: compute_dtype(&device),
            fused: true,
            gradient_checkpointing: false,
            shared_prefixes: true,
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
        let layers = self
            .layers
            .iter()
            .map(|l| l.map(&f))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: self.cfg.clone(),
            embed_tokens: f(&self.embed_tokens)?,
            layers,
            norm: f(&self.norm)?,
            lm_head: self.lm_head.as_ref().map(&f).transpose()?,
            sampling_head: self.sampling_head.as_ref().map(&f).transpose()?,
            frozen_base: self.frozen_base,
            dtype: self.dtype,
            fused: self.fused,
            gradient_checkpointing: self.gradient_checkpointing,
            shared_prefixes: self.shared_prefixes,
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
                w.insert(
                    format!("{path}.weight"),
                    lin.merged_weight(Layout::RowMajor)?,
                );
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
            for lin in l.projections_mut() {
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
    /// memory of all layers but one. Gradients are unchanged. f32 on the CPU only; elsewhere it is
    /// ignored.
    pub fn with_gradient_checkpointing(&self, on: bool) -> Self {
        let mut m = self.clone();
        m.gradient_checkpointing = on;
        m
    }

    /// Whether activation checkpointing is on.
    pub fn gradient_checkpointing(&self) -> bool {
        self.gradient_checkpointing
    }

    /// The same model scoring batches over their prefix tree (on) or row by row, padded (off):
    /// the same log-probs, values and gradients either way ([`crate::shared_prefix`]). On by
    /// default.
    pub fn with_shared_prefixes(&self, on: bool) -> Self {
        let mut m = self.clone();
        m.shared_prefixes = on;
        m
    }

    /// Whether [`crate::score`], [`crate::Critic::values`] and [`crate::hidden_states`] compute
    /// each distinct prefix of a batch once: when switched on, on the fused CPU kernels in f32,
    /// without activation checkpointing (which keeps the padded path's memory bound).
    pub fn shares_training_prefixes(&self) -> bool {
        self.shared_prefixes && self.shares_prefixes() && !self.gradient_checkpointing
    }

    /// Whether [`crate::sample_cached`] can share prompt prefixes with this model: its packed
    /// forward over cached segments ([`crate::packed`]) needs the fused kernels on the CPU in f32
    /// (not a CUDA device, not a bf16 compute dtype). Callers decide on prefix sharing with it
    /// once, before they make a [`crate::PrefixCache`].
    pub fn shares_prefixes(&self) -> bool {
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
            for lin in l.projections_mut() {
                lin.lora = None;
            }
        }
        m.frozen_base = true;
        m
    }

    /// A detached copy for sampling with every LoRA adapter merged into its base weight
    /// (`W + scale · B A`), so that each projection is
    /// one GEMM instead of the base GEMM, two rank-r GEMMs, a scale and a sum. The merged
    /// weights are new tensors: the copy does not see later optimiser steps, so make one per
    /// rollout. Logits agree with the unmerged model's up to float rounding (within 1e-5 on the
    /// tiny models, `tests::lora`). Projections without an adapter share their weights.
    ///
    /// # Errors
    /// Tensor errors (allocation).
    pub fn merged_lora(&self) -> Result<Self> {
        let mut m = self.detached();
        for l in &mut m.layers {
            for lin in l.projections_mut() {
                if lin.lora.is_some() {
                    lin.weight = lin.merged_weight(Layout::RowMajor)?;
                    lin.lora = None;
                }
            }
        }
        Ok(m)
    }

    /// A detached copy for sampling, with every LoRA adapter merged ([`LlamaModel::merged_lora`]),
    /// whose projection and lm_head weights are stored column-major on the CPU: each `W`
    /// [out, in] (`W + scale · B A` where an adapter is) becomes the transpose view of a
    /// contiguous [in, out] buffer, so `x Wᵀ` hands the `gemm` crate a right-hand side it reads
    /// in place. The crate computes a row-major product as its transpose, `W` as the left
    /// operand, and packs a left operand stored row by row into column panels on every call
    /// (`gemm-common` `gemm.rs`, `gemm_basic_generic`: `do_prepack_lhs` / `do_pack_lhs` when
    /// `lhs_rs != 1`); at a decode step of a few rows that repacking of every weight costs
    /// more than the product. Products of many rows are the same sums in the same order; a
    /// decode step's few rows are summed in another order by the crate, so logits differ in
    /// their last bits (`tests::sampling::the_sampling_layout_gives_the_same_logits`). The
    /// projections and the lm_head are copies, built one at a time (the row-major lm_head stays,
    /// shared, for the embedding and the fused log-prob kernel), the norms and the embedding
    /// shared views, so the model does not follow later optimiser steps as a whole: make one per
    /// rollout. Other devices and compute dtypes than the CPU's f32 get
    /// [`LlamaModel::merged_lora`].
    ///
    /// # Errors
    /// Tensor errors (allocation).
    pub fn for_sampling(&self) -> Result<Self> {
        if !self.device().is_cpu() || self.dtype != DType::F32 {
            return self.merged_lora();
        }
        let mut m = self.detached();
        for l in &mut m.layers {
            for lin in l.projections_mut() {
                *lin = lin.column_major()?;
            }
        }
        m.sampling_head = Some(m.lm_head_weight().t()?.contiguous()?.t()?);
        Ok(m)
    }

    /// Final hidden states after the last RMSNorm.
    ///
    /// * `input_ids`: [B, T] u32, the new tokens (T = all tokens without a cache, 1 per decode
    ///   step).
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
            c.fit(self.layers.len(), if self.fuse(&x) { 1 } else { 2 });
        }
        for (i, layer) in self.layers.iter().enumerate() {
            if self.gradient_checkpointing && cache.is_none() && ops::fusable(&x) {
                x = recompute::checkpointed_layer(self, i, &x, mask)?;
                continue;
            }
            x = self.layer_forward(layer, &x, mask, cache.as_deref_mut().map(|c| (c, i)))?;
        }
        let keys = cache.as_deref().map_or(t, KvCache::seq_len);
        let tokens = (b * t) as u64;
        crate::flops::add_layers(&self.cfg, tokens, tokens * keys as u64, self.training());
        self.rms_norm(&x, &self.norm)
    }

    /// Whether a forward records a graph for a backward: the weights or adapters are variables
    /// (not a [`LlamaModel::detached`] or [`LlamaModel::inference_view`] model).
    pub(crate) fn records_graph(&self) -> bool {
        self.layers.first().is_some_and(|l| {
            l.q_proj.weight.is_variable()
                || l.q_proj.lora.as_ref().is_some_and(|a| a.a.is_variable())
        })
    }

    /// Whether a forward records a graph and what its backward computes (the FLOP counters).
    pub(crate) fn training(&self) -> crate::flops::Training {
        use crate::flops::Training;
        match (self.records_graph(), self.frozen_base) {
            (false, _) => Training::No,
            (true, true) => Training::Adapters,
            (true, false) => Training::Weights,
        }
    }

    /// RMSNorm in f32 (fused on the CPU).
    fn rms_norm(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        if self.fuse(x) && ops::fusable(w) {
            return Ok(ops::rms_norm(x, w, self.cfg.rms_norm_eps)?);
        }
        Ok(ops::rms_norm_composed(x, w, self.cfg.rms_norm_eps)?)
    }

    /// Logits of selected hidden states: [N, D] -> [N, V] in f32 (tied or untied lm_head).
    ///
    /// # Errors
    /// Shape mismatch.
    pub fn lm_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let w = self
            .sampling_head
            .as_ref()
            .or(self.lm_head.as_ref())
            .unwrap_or(&self.embed_tokens);
        let rows = hidden.elem_count() / self.cfg.hidden_size.max(1);
        crate::flops::add_head(&self.cfg, rows as u64, self.training());
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
}
