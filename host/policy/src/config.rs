//! Model hyper-parameters, mirroring a Hugging Face `config.json` of the Llama and Qwen2 families.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{PolicyError, Result};

/// The seven projections of a decoder layer as (Hugging Face block, module name), in the order
/// of the model's `DecoderLayer::projections` (`model/layer.rs`) and of LoRA's targets.
pub(crate) const PROJECTIONS: [(&str, &str); 7] = [
    ("self_attn", "q_proj"),
    ("self_attn", "k_proj"),
    ("self_attn", "v_proj"),
    ("self_attn", "o_proj"),
    ("mlp", "gate_proj"),
    ("mlp", "up_proj"),
    ("mlp", "down_proj"),
];

/// The architecture family: decides q/k/v biases and GGUF q/k row permutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Llama (SmolLM2): no attention biases unless `attention_bias` says so.
    Llama,
    /// Qwen2 (Qwen2.5): biases on q, k and v projections.
    Qwen2,
}

/// Hyper-parameters of a decoder-only transformer (Llama or Qwen2 family).
///
/// Field names equal the keys of Hugging Face `config.json`, so the file deserialises directly;
/// unknown keys are ignored (HF configs carry many irrelevant ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `["LlamaForCausalLM"]` or `["Qwen2ForCausalLM"]`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `"llama"` or `"qwen2"`.
    pub model_type: String,
    /// Vocabulary size V (rows of the embedding).
    pub vocab_size: usize,
    /// Model width D.
    pub hidden_size: usize,
    /// SwiGLU inner width F.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads H.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to H.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head dimension; defaults to D / H.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base θ.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// Longest supported sequence.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// Whether the lm_head reuses the token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Llama's switch for q/k/v/o biases (Qwen2 always has q/k/v biases and no o bias).
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// Begin-of-sequence id, informational.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_max_pos() -> usize {
    4096
}

impl ModelConfig {
    /// Read and validate a `config.json`.
    ///
    /// # Errors
    /// [`PolicyError::Io`] when unreadable, [`PolicyError::InvalidModel`] naming the file when it
    /// does not parse or is inconsistent.
    pub fn from_json_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::io(path, e))?;
        let cfg: Self = serde_json::from_str(&text)
            .map_err(|e| PolicyError::invalid_model(path, format!("config.json: {e}")))?;
        cfg.validate()
            .map_err(|reason| PolicyError::invalid_model(path, reason))?;
        Ok(cfg)
    }

    /// Check internal consistency; returns the reason on failure.
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        let h = self.num_attention_heads;
        if h == 0 || self.hidden_size == 0 || self.num_hidden_layers == 0 || self.vocab_size == 0 {
            return Err("sizes must be positive".into());
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(h) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {h}",
                self.hidden_size
            ));
        }
        if !h.is_multiple_of(self.num_kv_heads()) {
            return Err(format!(
                "num_attention_heads {h} is not a multiple of num_key_value_heads {}",
                self.num_kv_heads()
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err("head_dim must be even for RoPE".into());
        }
        if !matches!(self.model_type.as_str(), "llama" | "qwen2") {
            return Err(format!(
                "model_type {:?} is not supported (llama, qwen2)",
                self.model_type
            ));
        }
        Ok(())
    }

    /// The architecture family from `model_type`.
    pub fn family(&self) -> Family {
        if self.model_type == "qwen2" {
            Family::Qwen2
        } else {
            Family::Llama
        }
    }

    /// Key/value heads.
    pub fn num_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Whether q/k/v projections carry a bias (Qwen2: yes; Llama: `attention_bias`).
    pub fn qkv_bias(&self) -> bool {
        match self.family() {
            Family::Qwen2 => true,
            Family::Llama => self.attention_bias.unwrap_or(false),
        }
    }

    /// Whether the output projection carries a bias (Llama with `attention_bias` only).
    pub fn o_bias(&self) -> bool {
        self.family() == Family::Llama && self.attention_bias.unwrap_or(false)
    }

    /// A tiny Llama-shaped config for fast tests and benchmarks of the plumbing; its context (2048)
    /// holds a two-turn Sokoban prompt, which `serve` refuses beyond the context.
    pub fn tiny(vocab_size: usize) -> Self {
        Self {
            architectures: vec!["LlamaForCausalLM".into()],
            model_type: "llama".into(),
            vocab_size,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
            head_dim: None,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            max_position_embeddings: 2048,
            tie_word_embeddings: true,
            attention_bias: None,
            bos_token_id: None,
        }
    }
}
