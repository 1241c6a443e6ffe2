//! Model FLOPs counted from the shapes of every forward pass, for `bench iteration`'s utilisation
//! figure (`docs/benchmarks.md`, "bench iteration").
//!
//! A forward of `N` new tokens attending to `K` key positions costs, per decoder layer, two FLOPs
//! per multiply-add of its projections, `2·N·(D·Hq + 2·D·Hkv + Hq·D + 3·D·I)` (q, k, v, o and the
//! gated MLP; `Hq`/`Hkv` = heads × head size), plus `4·N·K·Hq` for the attention scores and the
//! weighted values; the language-model head adds `2·N·D·V` for the rows it is applied to. This is
//! the usual "2 × parameters per token, plus attention" count (Kaplan et al. 2020, "Scaling Laws
//! for Neural Language Models", §2.1, Table 1); embeddings, norms, softmax and LoRA's rank-r
//! products are left out (under 1 % of the total at rank 8). A causal forward without a cache
//! counts the full `N × N` score matrix, as the kernels compute it.
//!
//! Forwards of a model that records a graph (training) and of a detached one (sampling, scoring)
//! are counted apart, and a training forward also counts its backward as the kernels execute it
//! ([`layer_backward_flops`], [`head_backward_flops`]): the gradient of every projection's input
//! (`2·N` per weight), the gradient of the weight itself only where the weight trains (full
//! fine-tuning; a LoRA backward computes none for the frozen base), and the attention backward of
//! the fused kernel (`ops/attention.rs`: it recomputes the scores, then dV, dP, dQ and dK,
//! `10·pairs·Hq`). The counters are process-wide.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::ModelConfig;

static INFERENCE: AtomicU64 = AtomicU64::new(0);
static TRAINING: AtomicU64 = AtomicU64::new(0);
static BACKWARD: AtomicU64 = AtomicU64::new(0);

/// FLOPs counted so far in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlopCount {
    /// Forwards of detached models (sampling, scoring, validation).
    pub inference: u64,
    /// Forwards of models that record a graph (the updates).
    pub training_forward: u64,
    /// The backwards of those forwards, as executed.
    pub training_backward: u64,
}

impl FlopCount {
    /// The counters now.
    pub fn now() -> Self {
        Self {
            inference: INFERENCE.load(Ordering::Relaxed),
            training_forward: TRAINING.load(Ordering::Relaxed),
            training_backward: BACKWARD.load(Ordering::Relaxed),
        }
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            inference: self.inference.saturating_sub(earlier.inference),
            training_forward: self
                .training_forward
                .saturating_sub(earlier.training_forward),
            training_backward: self
                .training_backward
                .saturating_sub(earlier.training_backward),
        }
    }

    /// All the work: forwards and the training backwards.
    pub fn with_backward(self) -> u64 {
        self.inference + self.training_forward + self.training_backward
    }
}

/// Weights per decoder layer in its projections (q, k, v, o and the gated MLP).
fn projection_weights(cfg: &ModelConfig) -> u64 {
    let d = cfg.hidden_size as u64;
    let i = cfg.intermediate_size as u64;
    let (hq, hkv) = heads(cfg);
    d * hq + 2 * d * hkv + hq * d + 3 * d * i
}

/// Query and key/value widths (heads × head size).
fn heads(cfg: &ModelConfig) -> (u64, u64) {
    (
        (cfg.num_attention_heads * cfg.head_dim()) as u64,
        (cfg.num_kv_heads() * cfg.head_dim()) as u64,
    )
}

/// FLOPs of the backward of the decoder layers for `tokens` tokens attending to `pairs`
/// (query, key) pairs: input gradients of the projections, weight gradients when
/// `weights_train`, and the fused attention backward.
pub fn layer_backward_flops(
    cfg: &ModelConfig,
    tokens: u64,
    pairs: u64,
    weights_train: bool,
) -> u64 {
    let per_weight = if weights_train { 4 } else { 2 };
    let per_layer = per_weight * tokens * projection_weights(cfg) + 10 * pairs * heads(cfg).0;
    per_layer * cfg.num_hidden_layers as u64
}

/// FLOPs of the head's backward for `rows` rows: the input gradient, and the weight gradient
/// when `weights_train`.
pub fn head_backward_flops(cfg: &ModelConfig, rows: u64, weights_train: bool) -> u64 {
    head_flops(cfg, rows) * if weights_train { 2 } else { 1 }
}

/// FLOPs of the decoder layers for `tokens` new tokens, each over `keys` key positions.
pub fn layer_flops(cfg: &ModelConfig, tokens: u64, keys: u64) -> u64 {
    layer_flops_pairs(cfg, tokens, tokens * keys)
}

/// FLOPs of the decoder layers for `tokens` new tokens that attend to `pairs` (query, key) pairs
/// in all (a packed forward, where each token has its own number of keys).
pub fn layer_flops_pairs(cfg: &ModelConfig, tokens: u64, pairs: u64) -> u64 {
    let per_layer = 2 * tokens * projection_weights(cfg) + 4 * pairs * heads(cfg).0;
    per_layer * cfg.num_hidden_layers as u64
}

/// FLOPs of the language-model head for `rows` rows.
pub fn head_flops(cfg: &ModelConfig, rows: u64) -> u64 {
    2 * rows * (cfg.hidden_size * cfg.vocab_size) as u64
}

/// Count a forward through the layers of `tokens` tokens over `pairs` (query, key) pairs;
/// `training`: the model records a graph, and its backward is counted too (`weights_train`: the
/// base weights get gradients).
pub(crate) fn add_layers(cfg: &ModelConfig, tokens: u64, pairs: u64, training: Training) {
    add(
        training,
        layer_flops_pairs(cfg, tokens, pairs),
        layer_backward_flops(cfg, tokens, pairs, training == Training::Weights),
    );
}

/// Count the head on `rows` rows (see [`add_layers`]).
pub(crate) fn add_head(cfg: &ModelConfig, rows: u64, training: Training) {
    add(
        training,
        head_flops(cfg, rows),
        head_backward_flops(cfg, rows, training == Training::Weights),
    );
}

/// Whether a forward records a graph, and what its backward computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Training {
    /// No graph (sampling, scoring).
    No,
    /// A graph, the base weights frozen (LoRA): input gradients only.
    Adapters,
    /// A graph with gradients of the weights (full fine-tuning).
    Weights,
}

fn add(training: Training, forward: u64, backward: u64) {
    if training == Training::No {
        INFERENCE.fetch_add(forward, Ordering::Relaxed);
    } else {
        TRAINING.fetch_add(forward, Ordering::Relaxed);
        BACKWARD.fetch_add(backward, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M: D 576, I 1536, 30 layers, 9 query heads and 3 KV heads of 64, V 49152.
    fn smollm2() -> ModelConfig {
        let mut cfg = ModelConfig::tiny(49152);
        cfg.hidden_size = 576;
        cfg.intermediate_size = 1536;
        cfg.num_hidden_layers = 30;
        cfg.num_attention_heads = 9;
        cfg.num_key_value_heads = Some(3);
        cfg.head_dim = Some(64);
        cfg
    }

    #[test]
    fn smollm2_135m_costs_two_flops_per_parameter_and_token_plus_attention() {
        // SmolLM2-135M: D 576, I 1536, 30 layers, 9 query heads and 3 KV heads of 64, V 49152.
        let cfg = smollm2();
        // Per layer: q 576·576 + k, v 2·576·192 + o 576·576 + MLP 3·576·1536 = 3,538,944
        // parameters; 30 layers: 106,168,320.
        assert_eq!(layer_flops(&cfg, 1, 0), 2 * 106_168_320);
        // 10 tokens over 100 keys: attention adds 4·10·100·576 per layer.
        assert_eq!(
            layer_flops(&cfg, 10, 100),
            2 * 10 * 106_168_320 + 30 * 4 * 10 * 100 * 576
        );
        // The tied head: 576 × 49,152 = 28,311,552 parameters.
        assert_eq!(head_flops(&cfg, 3), 2 * 3 * 28_311_552);
    }

    #[test]
    fn the_total_adds_inference_forwards_and_backwards() {
        let c = FlopCount {
            inference: 10,
            training_forward: 7,
            training_backward: 11,
        };
        assert_eq!(c.with_backward(), 28);
        assert_eq!(
            c.since(FlopCount {
                inference: 4,
                training_forward: 2,
                training_backward: 1,
            }),
            FlopCount {
                inference: 6,
                training_forward: 5,
                training_backward: 10,
            }
        );
    }

    #[test]
    fn a_lora_backward_costs_the_input_gradients_and_a_full_one_the_weights_too() {
        // SmolLM2-135M's 106,168,320 projection weights (above), 30 layers of 9 x 64 query
        // heads: 10 tokens over 55 pairs (a causal 10 x 10 square's lower half, plus its
        // diagonal). LoRA: 2 FLOPs per weight and token for dX, 10 per pair and query width for
        // the attention backward; full fine-tuning adds 2 per weight and token for dW.
        let cfg = smollm2();
        let attention = 30 * 10 * 55 * 576;
        assert_eq!(
            layer_backward_flops(&cfg, 10, 55, false),
            2 * 10 * 106_168_320 + attention
        );
        assert_eq!(
            layer_backward_flops(&cfg, 10, 55, true),
            4 * 10 * 106_168_320 + attention
        );
        assert_eq!(head_backward_flops(&cfg, 3, false), 2 * 3 * 28_311_552);
        assert_eq!(head_backward_flops(&cfg, 3, true), 4 * 3 * 28_311_552);
    }
}
