//! The trainable policy: a [`LlamaModel`] whose trainable tensors are candle `Var`s (all weights,
//! or only LoRA adapters), plus its sampler view and its frozen reference copy.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::{ModelConfig, PROJECTIONS};
use crate::hf_dir::{write_hf_dir, write_json};
use crate::loader::LoadedModel;
use crate::lora::{LoraAdapter, LoraConfig};
use crate::model::{LlamaModel, ModelParts, Weights, layer_projection_paths, projection_shapes};
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// What an optimiser updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Trainable {
    /// Every weight (full fine-tuning).
    Full,
    /// Only LoRA adapters; base weights stay bit-identical and get no gradient work.
    Lora(LoraConfig),
}

/// A trainable tensor with its checkpoint name.
#[derive(Debug, Clone)]
pub struct NamedParam {
    /// Hugging Face name (`model.layers.0.mlp.up_proj.weight`) or, for adapters, PEFT-style
    /// `model.layers.0.mlp.up_proj.lora_A.weight`.
    pub name: String,
    /// The variable (updated in place by the optimiser).
    pub var: Var,
}

impl NamedParam {
    /// Whether AdamW applies weight decay: matrices only (not norms, biases, vectors).
    pub fn decays(&self) -> bool {
        self.var.rank() >= 2
    }
}

/// Build a model over `weights` where the selected tensors become Vars.
pub(crate) fn build_trainable(
    cfg: &ModelConfig,
    weights: &Weights,
    trainable: &Trainable,
    seed: u64,
) -> Result<(LlamaModel, Vec<NamedParam>)> {
    match trainable {
        Trainable::Full => build_full(cfg, weights),
        Trainable::Lora(lora) => build_lora(cfg, weights, lora, seed),
    }
}

/// Full fine-tuning: every decoder tensor (and an untied lm_head) becomes a Var.
fn build_full(cfg: &ModelConfig, weights: &Weights) -> Result<(LlamaModel, Vec<NamedParam>)> {
    // Only the decoder's own tensors (a critic directory also holds `score.*`).
    let mut names: Vec<&String> = weights
        .keys()
        .filter(|n| {
            n.starts_with("model.") || (n.as_str() == "lm_head.weight" && !cfg.tie_word_embeddings)
        })
        .collect();
    names.sort();
    let mut params = Vec::with_capacity(names.len());
    let mut vars = Weights::new();
    for name in names {
        let var = Var::from_tensor(&weights[name].to_dtype(DType::F32)?)?;
        vars.insert(name.clone(), var.as_tensor().clone());
        params.push(NamedParam {
            name: name.clone(),
            var,
        });
    }
    let empty = HashMap::new();
    let model = LlamaModel::new(
        cfg,
        &ModelParts {
            weights: &vars,
            adapters: &empty,
            frozen_base: false,
        },
    )?;
    Ok((model, params))
}

/// Refuse a rank above the smaller side of a projection it adapts (a rank past min(in, out)
/// adds parameters and no expressiveness), before any adapter is allocated: a rank of 2^32
/// aborted on the allocation.
fn check_rank(cfg: &ModelConfig, lora: &LoraConfig) -> Result<()> {
    let smallest = PROJECTIONS
        .iter()
        .zip(projection_shapes(cfg))
        .filter(|((_, name), _)| lora.targets(name))
        .map(|((_, name), shape)| (shape.input.min(shape.output), *name))
        .min();
    match smallest {
        Some((side, name)) if lora.rank > side => Err(PolicyError::arg(
            "lora.rank",
            format!(
                "{} is above {side}, the smaller side of {name} (a rank is at most min(in, out) \
                 of every projection it adapts)",
                lora.rank
            ),
        )),
        _ => Ok(()),
    }
}

/// LoRA: frozen base weights and a fresh adapter pair (PEFT's initialisation, seeded) on every
/// targeted projection.
fn build_lora(
    cfg: &ModelConfig,
    weights: &Weights,
    lora: &LoraConfig,
    seed: u64,
) -> Result<(LlamaModel, Vec<NamedParam>)> {
    lora.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut adapters = HashMap::new();
    let mut params = Vec::new();
    let device = weights
        .values()
        .next()
        .map(|t| t.device().clone())
        .ok_or_else(|| PolicyError::arg("weights", "empty weight map"))?;
    check_rank(cfg, lora)?;
    for i in 0..cfg.num_hidden_layers {
        for (path, _) in layer_projection_paths(i) {
            if !lora.targets(&path) {
                continue;
            }
            let w = weights.get(&format!("{path}.weight")).ok_or_else(|| {
                PolicyError::MissingTensor {
                    name: format!("{path}.weight"),
                }
            })?;
            let (out, inp) = w.dims2()?;
            // PEFT init: A ~ kaiming-uniform(a = √5) = U(-1/√in, 1/√in), B = 0.
            let bound = 1.0 / (inp as f32).sqrt();
            let a: Vec<f32> = (0..lora.rank * inp)
                .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * bound)
                .collect();
            let a = Var::from_tensor(&Tensor::from_vec(a, (lora.rank, inp), &device)?)?;
            let b = Var::zeros((out, lora.rank), DType::F32, &device)?;
            adapters.insert(
                path.clone(),
                LoraAdapter {
                    a: a.as_tensor().clone(),
                    b: b.as_tensor().clone(),
                    scale: lora.scale(),
                },
            );
            params.push(NamedParam {
                name: format!("{path}.lora_A.weight"),
                var: a,
            });
            params.push(NamedParam {
                name: format!("{path}.lora_B.weight"),
                var: b,
            });
        }
    }
    let model = LlamaModel::new(
        cfg,
        &ModelParts {
            weights,
            adapters: &adapters,
            frozen_base: true,
        },
    )?;
    Ok((model, params))
}

/// The policy being trained (the actor).
#[derive(Debug, Clone)]
pub struct Policy {
    model: LlamaModel,
    params: Vec<NamedParam>,
    trainable: Trainable,
    tokenizer: Tokenizer,
}

impl Policy {
    /// Make the trainable policy from loaded weights. `seed` initialises LoRA's `A` matrices.
    ///
    /// # Errors
    /// Invalid LoRA config; missing tensors.
    pub fn new(loaded: &LoadedModel, trainable: Trainable, seed: u64) -> Result<Self> {
        let (model, params) = build_trainable(&loaded.config, &loaded.weights, &trainable, seed)?;
        Ok(Self {
            model,
            params,
            trainable,
            tokenizer: loaded.tokenizer.clone(),
        })
    }

    /// The same policy computing in `dtype` (bf16 or f32; master weights stay f32). Models are
    /// created with [`crate::compute_dtype`] of their device; this overrides it.
    pub fn with_compute_dtype(mut self, dtype: DType) -> Self {
        self.model = self.model.with_compute_dtype(dtype);
        self
    }

    /// Switch activation (gradient) checkpointing on or off for training forwards
    /// ([`LlamaModel::with_gradient_checkpointing`]).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.model = self.model.with_gradient_checkpointing(on);
    }

    /// The autograd model (use with [`crate::score`] for training).
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// A detached view sharing the weights: sees every optimiser step and never records a graph
    /// (scoring without gradients; rollouts sample from [`Policy::rollout_model`]).
    pub fn sampler(&self) -> LlamaModel {
        self.model.detached()
    }

    /// The model a rollout samples from: a copy of the current weights, for LoRA with the
    /// adapters merged into the base weights ([`LlamaModel::merged_lora`]), stored as sampling
    /// reads them fastest on the CPU ([`LlamaModel::for_sampling`]). Its projections are copies
    /// made now, which later optimiser steps do not reach: make one per rollout. Sampling then
    /// runs one GEMM per projection, as a model without adapters does; training and scoring keep
    /// the adapters unmerged ([`Policy::model`], [`Policy::sampler`]).
    ///
    /// # Errors
    /// Allocation failures.
    pub fn rollout_model(&self) -> Result<LlamaModel> {
        self.model.for_sampling()
    }

    /// A frozen reference policy with the current weights (full: a copy; LoRA: the base model,
    /// which shares the frozen weights and costs no memory).
    ///
    /// # Errors
    /// Allocation failures.
    pub fn reference(&self) -> Result<LlamaModel> {
        match self.trainable {
            Trainable::Full => self.model.deep_copy(),
            Trainable::Lora(_) => Ok(self.model.without_adapters()),
        }
    }

    /// The trainable tensors, in a fixed order.
    pub fn params(&self) -> &[NamedParam] {
        &self.params
    }

    /// Total number of trainable scalars.
    pub fn num_trainable(&self) -> usize {
        self.params.iter().map(|p| p.var.elem_count()).sum()
    }

    /// What is trained.
    pub fn trainable(&self) -> &Trainable {
        &self.trainable
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    /// Write the policy as a Hugging Face directory into `dir` (which must exist):
    /// `model.safetensors` (full: current weights; LoRA: base weights), `config.json`,
    /// `tokenizer.json`, and for LoRA a PEFT adapter (`adapter_model.safetensors`,
    /// `adapter_config.json`). Not atomic by itself: see [`crate::save_checkpoint`].
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        let weights = match &self.trainable {
            Trainable::Full => self.model.hf_weights()?,
            Trainable::Lora(_) => self.model.without_adapters().hf_weights()?,
        };
        write_hf_dir(dir, self.config(), &weights, &self.tokenizer)?;
        if let Trainable::Lora(cfg) = &self.trainable {
            let adapters: HashMap<String, Tensor> = self
                .params
                .iter()
                .map(|p| {
                    (
                        format!("base_model.model.{}", p.name),
                        p.var.as_tensor().detach(),
                    )
                })
                .collect();
            let path = dir.join("adapter_model.safetensors");
            candle_core::safetensors::save(&adapters, &path)?;
            let json = serde_json::json!({
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": cfg.rank,
                "lora_alpha": cfg.alpha,
                "target_modules": cfg.target_modules,
                "lora_dropout": 0.0,
                "bias": "none",
            });
            write_json(&dir.join("adapter_config.json"), &json)?;
        }
        Ok(())
    }

    /// Load a policy written by [`Policy::save_pretrained`] (LoRA when `adapter_config.json`
    /// exists, else full fine-tuning) onto [`crate::default_device`].
    ///
    /// # Errors
    /// [`PolicyError::Checkpoint`] naming the file when it is incomplete.
    pub fn from_pretrained(dir: &Path, seed: u64) -> Result<Self> {
        Self::from_pretrained_on(dir, seed, &crate::default_device()?)
    }

    /// Like [`Policy::from_pretrained`], on `device`. Checkpoints hold f32 tensors whatever
    /// device wrote them, so one written on a GPU resumes on the CPU and vice versa.
    ///
    /// # Errors
    /// See [`Policy::from_pretrained`].
    pub fn from_pretrained_on(dir: &Path, seed: u64, device: &Device) -> Result<Self> {
        let loaded = crate::loader::load_on(dir, device)?;
        let adapter_cfg = dir.join("adapter_config.json");
        if !adapter_cfg.exists() {
            return Self::new(&loaded, Trainable::Full, seed);
        }
        let bad = |path: &Path, reason: String| PolicyError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        let text =
            std::fs::read_to_string(&adapter_cfg).map_err(|e| PolicyError::io(&adapter_cfg, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(&adapter_cfg, e.to_string()))?;
        let lora = LoraConfig {
            rank: v["r"]
                .as_u64()
                .ok_or_else(|| bad(&adapter_cfg, "missing r".into()))? as usize,
            alpha: v["lora_alpha"]
                .as_f64()
                .ok_or_else(|| bad(&adapter_cfg, "missing lora_alpha".into()))?,
            target_modules: serde_json::from_value(v["target_modules"].clone())
                .map_err(|e| bad(&adapter_cfg, format!("target_modules: {e}")))?,
        };
        let policy = Self::new(&loaded, Trainable::Lora(lora), seed).map_err(|e| match e {
            // `r`, `lora_alpha` or `target_modules` out of range: the file is at fault
            PolicyError::InvalidArgument { name, reason } => {
                bad(&adapter_cfg, format!("{name}: {reason}"))
            }
            e => e,
        })?;
        let path = dir.join("adapter_model.safetensors");
        let tensors = candle_core::safetensors::load(&path, policy.model.device())
            .map_err(|e| bad(&path, e.to_string()))?;
        for p in &policy.params {
            let t = tensors
                .get(&format!("base_model.model.{}", p.name))
                .ok_or_else(|| bad(&path, format!("missing adapter tensor {}", p.name)))?;
            p.var
                .set(&t.to_dtype(DType::F32)?)
                .map_err(|e| bad(&path, format!("{}: {e}", p.name)))?;
        }
        Ok(policy)
    }
}
