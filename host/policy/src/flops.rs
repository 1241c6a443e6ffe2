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
//! are counted apart: a backward pass costs about twice its forward (Kaplan et al. §2.1), so the
//! training work is about three times the training forwards. The counters are process-wide.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::ModelConfig;

static INFERENCE: AtomicU64 = AtomicU64::new(0);
static TRAINING: AtomicU64 = AtomicU64::new(0);

/// Forward FLOPs counted so far in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlopCount {
    /// Forwards of detached models (sampling, scoring, validation).
    pub inference: u64,
    /// Forwards of models that record a graph (the updates); their backward is not included.
    pub training_forward: u64,
}

impl FlopCount {
    /// The counters now.
    pub fn now() -> Self {
        Self {
            inference: INFERENCE.load(Ordering::Relaxed),
            training_forward: TRAINING.load(Ordering::Relaxed),
        }
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            inference: self.inference.saturating_sub(earlier.inference),
            training_forward: self
                .training_forward
                .saturating_sub(earlier.training_forward),
        }
    }

    /// The work these forwards stand for: inference forwards once, training forwards three times
    /// (forward plus a backward of about twice its cost).
    pub fn with_backward(self) -> u64 {
        self.inference + 3 * self.training_forward
    }
}

/// FLOPs of the decoder layers for `tokens` new tokens, each over `keys` key positions.
pub fn layer_flops(cfg: &ModelConfig, tokens: u64, keys: u64) -> u64 {
    layer_flops_pairs(cfg, tokens, tokens * keys)
}

/// FLOPs of the decoder layers for `tokens` new tokens that attend to `pairs` (query, key) pairs
/// in all (a packed forward, where each token has its own number of keys).
pub fn layer_flops_pairs(cfg: &ModelConfig, tokens: u64, pairs: u64) -> u64 {
    let d = cfg.hidden_size as u64;
    let hq = (cfg.num_attention_heads * cfg.head_dim()) as u64;
    let hkv = (cfg.num_kv_heads() * cfg.head_dim()) as u64;
    let i = cfg.intermediate_size as u64;
    let projections = d * hq + 2 * d * hkv + hq * d + 3 * d * i;
    let per_layer = 2 * tokens * projections + 4 * pairs * hq;
    per_layer * cfg.num_hidden_layers as u64
}

/// FLOPs of the language-model head for `rows` rows.
pub fn head_flops(cfg: &ModelConfig, rows: u64) -> u64 {
    2 * rows * (cfg.hidden_size * cfg.vocab_size) as u64
}

/// Count `flops` of a forward; `training`: the model records a graph.
pub(crate) fn add(training: bool, flops: u64) {
    let counter = if training { &TRAINING } else { &INFERENCE };
    counter.fetch_add(flops, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_135m_costs_two_flops_per_parameter_and_token_plus_attention() {
        // SmolLM2-135M: D 576, I 1536, 30 layers, 9 query heads and 3 KV heads of 64, V 49152.
        let mut cfg = ModelConfig::tiny(49152);
        cfg.hidden_size = 576;
        cfg.intermediate_size = 1536;
        cfg.num_hidden_layers = 30;
        cfg.num_attention_heads = 9;
        cfg.num_key_value_heads = Some(3);
        cfg.head_dim = Some(64);
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
    fn training_forwards_count_three_times() {
        let c = FlopCount {
            inference: 10,
            training_forward: 7,
        };
        assert_eq!(c.with_backward(), 31);
        assert_eq!(
            c.since(FlopCount {
                inference: 4,
                training_forward: 2
            }),
            FlopCount {
                inference: 6,
                training_forward: 5
            }
        );
    }
}
