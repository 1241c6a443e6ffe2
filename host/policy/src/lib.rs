//! ragen-gym's policy side, built on candle: Llama/Qwen2 models written for training, GGUF and
//! Hugging Face loading, the tokenizer with ChatML, batched sampling with a KV cache, per-token
//! log-probs and entropy that backpropagate, LoRA, a critic, AdamW and checkpoints.
//!
//! ```no_run
//! use ragen_gym_policy::{Message, SamplingParams, default_model_path, load, sample};
//! let loaded = load(&default_model_path())?;
//! let model = loaded.frozen_model()?;
//! let prompt = loaded.tokenizer.encode_chat(&[Message::user("What is 2+3?")], true)?;
//! let out = sample(&model, &loaded.tokenizer, &[prompt], &SamplingParams::default())?;
//! println!("{}", out[0].text);
//! # Ok::<(), ragen_gym_policy::PolicyError>(())
//! ```
#![deny(missing_docs)]

pub mod checkpoint;
pub mod config;
pub mod constrain;
pub mod cpu;
pub mod critic;
pub mod device;
pub mod error;
pub mod flops;
mod hf_dir;
pub mod loader;
pub mod lora;
pub mod model;
mod ops;
pub mod optim;
mod packed;
pub mod policy;
pub mod prefix_cache;
pub mod sampling;
pub mod scoring;
pub mod shared_prefix;
pub mod token_batch;
pub mod tokenizer;

#[cfg(test)]
mod tests;

pub use candle_core::{DType, Device, Tensor, Var};
pub use checkpoint::{
    CheckpointParts, RngState, critic_dir, policy_dir, read_trainer_state, recover_interrupted,
    save_checkpoint,
};
pub use config::{Family, ModelConfig};
pub use constrain::{ActionGrammar, ActionIndex, Constraint, Guide, Next, Thinking, TokenKind};
pub use critic::Critic;
pub use device::{DeviceSpec, compute_dtype, default_device, device_label, device_memory_used};
pub use error::{PolicyError, Result};
pub use flops::FlopCount;
pub use loader::{
    LoadedModel, cache_dir, default_model_path, load, load_default, load_on, load_spec,
    load_tokenizer, random_weights, resolve_model_path,
};
pub use lora::{LoraAdapter, LoraConfig};
pub use model::{AttentionMask, KvCache, LlamaModel, ModelParts, Weights};
pub use optim::{AdamW, AdamWConfig, LrSchedule, ParamGrads, clip_grad_norm};
pub use policy::{NamedParam, Policy, Trainable};
pub use prefix_cache::{PrefixCache, PrefixCacheStats};
pub use sampling::{
    FinishReason, RowSeed, Sample, SamplingParams, StopScan, sample, sample_cached,
    sample_constrained, sample_seeded,
};
pub use scoring::{Scores, hidden_states, score};
pub use shared_prefix::distinct_prefix_tokens;
pub use token_batch::TokenBatch;
pub use tokenizer::{Message, Role, Tokenizer};
