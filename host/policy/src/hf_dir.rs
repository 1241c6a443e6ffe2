//! Writing a Hugging Face model directory (`model.safetensors`, `config.json`, tokenizer files):
//! what checkpoints, `save_pretrained` and the optimiser state share.

use std::path::Path;

use candle_core::DType;

use crate::config::ModelConfig;
use crate::model::Weights;
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// Write `model.safetensors`, `config.json` and the tokenizer files into `dir`.
pub(crate) fn write_hf_dir(
    dir: &Path,
    cfg: &ModelConfig,
    weights: &Weights,
    tok: &Tokenizer,
) -> Result<()> {
    // f32 on disk whatever the compute dtype and device, so a checkpoint written on a GPU resumes
    // on the CPU and vice versa (docs/gpu.md). A no-op for f32 master weights.
    let weights = weights
        .iter()
        .map(|(k, t)| Ok((k.clone(), t.to_dtype(DType::F32)?)))
        .collect::<Result<Weights>>()?;
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&weights, &path)
        .map_err(|e| PolicyError::io(&path, std::io::Error::other(e.to_string())))?;
    let mut cfg_json =
        serde_json::to_value(cfg).map_err(|e| PolicyError::arg("config", e.to_string()))?;
    cfg_json["torch_dtype"] = "float32".into();
    cfg_json["hidden_act"] = "silu".into();
    write_json(&dir.join("config.json"), &cfg_json)?;
    tok.save(dir)
}

pub(crate) fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    let text =
        serde_json::to_string_pretty(v).map_err(|e| PolicyError::arg("json", e.to_string()))?;
    std::fs::write(path, text).map_err(|e| PolicyError::io(path, e))
}
