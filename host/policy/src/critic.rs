//! The critic: the same backbone as the policy with a scalar value head (PPO / GAE).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::hf_dir::write_hf_dir;
use crate::loader::LoadedModel;
use crate::model::LlamaModel;
use crate::policy::{NamedParam, Trainable, build_trainable};
use crate::scoring::HiddenRows;
use crate::token_batch::TokenBatch;
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// A value model `V(x_{≤t}) = w · h_t + b` on the policy architecture (verl's critic is
/// `AutoModelForTokenClassification` with one label; the head is named `score`).
#[derive(Debug, Clone)]
pub struct Critic {
    backbone: LlamaModel,
    /// [1, D]
    head_w: Var,
    /// [1]
    head_b: Var,
    params: Vec<NamedParam>,
    trainable: Trainable,
    tokenizer: Tokenizer,
}

impl Critic {
    /// A critic initialised from the policy's weights; the head is uniform with std 0.02, bias 0.
    ///
    /// # Errors
    /// Invalid LoRA config; missing tensors.
    pub fn new(loaded: &LoadedModel, trainable: Trainable, seed: u64) -> Result<Self> {
        // The critic has no lm_head (like a token-classification model): drop an untied one so
        // it is neither trained nor saved.
        let mut cfg = loaded.config.clone();
        let mut weights = loaded.weights.clone();
        if weights.remove("lm_head.weight").is_some() {
            cfg.tie_word_embeddings = true;
        }
        let (backbone, mut params) = build_trainable(&cfg, &weights, &trainable, seed)?;
        let d = loaded.config.hidden_size;
        let device = backbone.device().clone();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c217);
        let w: Vec<f32> = (0..d)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * 0.02 * 3f32.sqrt())
            .collect();
        let head_w = Var::from_tensor(&Tensor::from_vec(w, (1, d), &device)?)?;
        let head_b = Var::zeros(1, DType::F32, &device)?;
        params.push(NamedParam {
            name: "score.weight".into(),
            var: head_w.clone(),
        });
        params.push(NamedParam {
            name: "score.bias".into(),
            var: head_b.clone(),
        });
        Ok(Self {
            backbone,
            head_w,
            head_b,
            params,
            trainable,
            tokenizer: loaded.tokenizer.clone(),
        })
    }

    /// The same critic computing in `dtype` (see [`crate::Policy::with_compute_dtype`]).
    pub fn with_compute_dtype(mut self, dtype: DType) -> Self {
        self.backbone = self.backbone.with_compute_dtype(dtype);
        self
    }

    /// Values of every position: [B, T] f32 (position t values the state after token t; any
    /// value at padding).
    /// Backpropagates into the trainable tensors.
    ///
    /// # Errors
    /// Invalid batch; tensor errors.
    pub fn values(&self, batch: &TokenBatch) -> Result<Tensor> {
        let h = HiddenRows::of(&self.backbone, batch)?; // [M, D]
        let v = h.rows.matmul(&self.head_w.as_tensor().t()?)?; // [M, 1]
        let v = v.broadcast_add(self.head_b.as_tensor())?;
        let (b, t) = (batch.batch_size(), batch.seq_len());
        Ok(h.cells(&v, b)?.reshape((b, t))?)
    }

    /// Switch shared-prefix scoring of the backbone on or off
    /// ([`LlamaModel::with_shared_prefixes`]).
    pub fn set_shared_prefixes(&mut self, on: bool) {
        self.backbone = self.backbone.with_shared_prefixes(on);
    }

    /// Switch activation (gradient) checkpointing of the backbone on or off
    /// ([`LlamaModel::with_gradient_checkpointing`]).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.backbone = self.backbone.with_gradient_checkpointing(on);
    }

    /// The trainable tensors (backbone selection + value head).
    pub fn params(&self) -> &[NamedParam] {
        &self.params
    }

    /// The backbone.
    pub fn backbone(&self) -> &LlamaModel {
        &self.backbone
    }

    /// Write a Hugging Face directory: backbone weights (LoRA: the base, unmerged), `score.weight`,
    /// `score.bias`, config and tokenizer.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        // LoRA: base weights unmerged (adapters go to their own file), so reloading this directory
        // and restoring the adapters gives back exactly this critic.
        let mut w = match self.trainable {
            Trainable::Full => self.backbone.hf_weights()?,
            Trainable::Lora(_) => self.backbone.without_adapters().hf_weights()?,
        };
        w.insert("score.weight".into(), self.head_w.as_tensor().detach());
        w.insert("score.bias".into(), self.head_b.as_tensor().detach());
        write_hf_dir(dir, self.backbone.config(), &w, &self.tokenizer)?;
        if let Trainable::Lora(_) = self.trainable {
            let adapters: HashMap<String, Tensor> = self
                .params
                .iter()
                .filter(|p| p.name.contains(".lora_"))
                .map(|p| (p.name.clone(), p.var.as_tensor().detach()))
                .collect();
            let path = dir.join("critic_adapters.safetensors");
            candle_core::safetensors::save(&adapters, &path)?;
        }
        Ok(())
    }

    /// Restore the trainable tensors of this critic from a directory written by
    /// [`Critic::save_pretrained`] (the critic must have been built with the same [`Trainable`]).
    ///
    /// # Errors
    /// [`PolicyError::Checkpoint`] naming the file.
    pub fn load_trainable(&self, dir: &Path) -> Result<()> {
        let bad = |path: &Path, reason: String| PolicyError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        let device = self.backbone.device();
        let model = dir.join("model.safetensors");
        let mut tensors = candle_core::safetensors::load(&model, device)
            .map_err(|e| bad(&model, e.to_string()))?;
        if let Trainable::Lora(_) = self.trainable {
            let path = dir.join("critic_adapters.safetensors");
            tensors.extend(
                candle_core::safetensors::load(&path, device)
                    .map_err(|e| bad(&path, e.to_string()))?,
            );
        }
        for p in &self.params {
            let t = tensors
                .get(&p.name)
                .ok_or_else(|| bad(&model, format!("missing tensor {}", p.name)))?;
            p.var
                .set(&t.to_dtype(DType::F32)?)
                .map_err(|e| bad(&model, format!("{}: {e}", p.name)))?;
        }
        Ok(())
    }
}
