//! The work both sides of the GPU check do (`workload.json`, read by the PyTorch anchor
//! `scripts/gpu_check.py`): the model shape and seed, and the sizes of every part.

use std::path::PathBuf;

use anyhow::Context;
use ragen_gym_core::splitmix64;
use ragen_gym_policy::{
    self as pol, Device, LoadedModel, LoraConfig, ModelConfig, Tokenizer, Trainable,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::Shape;

/// Qwen2.5-0.5B-Instruct's `config.json` (hidden 896, 24 layers, 14 heads, 2 KV heads, FFN 4864,
/// vocab 151,936, tied embeddings).
const QWEN2_5_0_5B_CONFIG: &str =
    include_str!("../../../../../../tests/fixtures/models/qwen2.5-0.5b-instruct/config.json");

/// The work both sides do; `workload.json`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Workload {
    pub(super) shape: &'static str,
    pub(super) seed: u64,
    pub(super) config: ModelConfig,
    /// Correctness: rows of random tokens (lengths `check_len` minus 0, 5, 10, ...).
    pub(super) check_rows: usize,
    pub(super) check_len: usize,
    /// Correctness: tokens sampled per row for the sampler/scorer comparison.
    pub(super) check_new_tokens: usize,
    /// Sampling throughput: batch, prompt tokens, new tokens (temperature 1, no stop).
    pub(super) sample_batch: usize,
    pub(super) sample_prompt_len: usize,
    pub(super) sample_new_tokens: usize,
    /// Training step: sequences of `train_len` tokens, one per micro-batch, one AdamW step.
    pub(super) train_seqs: usize,
    pub(super) train_len: usize,
    /// LoRA (RAGEN `base-lora.yaml`: rank 64, alpha 64, all linear layers).
    pub(super) lora_rank: usize,
    pub(super) lora_alpha: f64,
    /// Config overrides of the iteration (on top of `configs/default.toml` + the Sokoban preset).
    pub(super) iteration: Vec<String>,
}

impl Workload {
    pub(super) fn new(shape: Shape, seed: u64) -> anyhow::Result<Self> {
        Ok(match shape {
            Shape::Qwen2_5_0_5b => Self {
                shape: "qwen2.5-0.5b",
                seed,
                config: serde_json::from_str(QWEN2_5_0_5B_CONFIG)
                    .context("embedded Qwen2.5-0.5B config.json")?,
                check_rows: 4,
                check_len: 96,
                check_new_tokens: 24,
                sample_batch: 128,
                sample_prompt_len: 256,
                sample_new_tokens: 400,
                train_seqs: 8,
                train_len: 1024,
                lora_rank: 64,
                lora_alpha: 64.0,
                iteration: vec![
                    // RAGEN's defaults (configs/default.toml): 8 x 16 rollouts, 5 turns, 400
                    // tokens per turn, batch 128, top 25% of groups, mini-batch 32, micro 1.
                    // Random responses re-encode to ~1.5x their tokens with the synthetic
                    // tokenizer, so the context limit is raised from 3,600.
                    "rollout.max_model_len=8192".into(),
                    // One validation env (the iteration does not validate; the pool is built).
                    "es_manager.val.env_groups=1".into(),
                ],
            },
            Shape::Tiny => Self {
                shape: "tiny",
                seed,
                config: ModelConfig::tiny(259),
                check_rows: 3,
                check_len: 24,
                check_new_tokens: 6,
                sample_batch: 4,
                sample_prompt_len: 16,
                sample_new_tokens: 8,
                train_seqs: 2,
                train_len: 32,
                lora_rank: 4,
                lora_alpha: 8.0,
                iteration: vec![
                    "es_manager.train.env_groups=2".into(),
                    "es_manager.train.group_size=2".into(),
                    "es_manager.val.env_groups=1".into(),
                    "agent_proxy.max_turn=2".into(),
                    "rollout.response_length=8".into(),
                    "rollout.max_model_len=8192".into(),
                    "rollout.generation_batch_size=4".into(),
                    "rollout.rollout_filter_ratio=1.0".into(),
                    "actor.ppo_mini_batch_size=4".into(),
                ],
            },
        })
    }

    /// The model: seeded random weights on `device`, a synthetic tokenizer of the same vocabulary.
    pub(super) fn loaded(&self, device: &Device) -> anyhow::Result<LoadedModel> {
        let weights = pol::random_weights(&self.config, self.seed, &Device::Cpu)?;
        let weights = to_device(&weights, device)?;
        Ok(LoadedModel {
            config: self.config.clone(),
            weights,
            tokenizer: Tokenizer::synthetic(self.config.vocab_size)?,
            source: PathBuf::from(format!("random:{}:seed={}", self.shape, self.seed)),
        })
    }

    /// LoRA at the workload's rank and alpha.
    pub(super) fn lora(&self) -> Trainable {
        Trainable::Lora(LoraConfig {
            rank: self.lora_rank,
            alpha: self.lora_alpha,
            ..LoraConfig::default()
        })
    }
}

/// `w` copied onto `device`.
pub(super) fn to_device(w: &pol::Weights, device: &Device) -> anyhow::Result<pol::Weights> {
    w.iter()
        .map(|(k, t)| Ok((k.clone(), t.to_device(device)?)))
        .collect()
}

/// Seeded token ids in `[3, vocab)` (no ChatML control tokens).
pub(super) fn random_ids(n: usize, vocab: usize, state: &mut u64) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let x = splitmix64(state);
            3 + (x % (vocab as u64 - 3)) as u32
        })
        .collect()
}

/// `workload.json`: the workload, the compute dtype and what the binary was built with.
pub(super) fn workload_json(w: &Workload, device: &Device) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(w)?;
    v["compute_dtype"] = format!("{:?}", pol::compute_dtype(device))
        .to_lowercase()
        .into();
    v["binary"] = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "cuda_feature": cfg!(feature = "cuda"),
        "debug_assertions": cfg!(debug_assertions),
    });
    v["cpu_threads"] = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .into();
    Ok(v)
}
