//! The model a command samples from, by what the user names: `default`, a run or checkpoint
//! directory, a policy directory (Hugging Face, with or without a LoRA adapter) or a `.gguf`
//! file.

use anyhow::Context;
use ragen_gym_policy as pol;
use std::path::{Path, PathBuf};

/// Load a model to sample from (`eval --model`, `serve`): a run directory (its latest
/// checkpoint), a checkpoint directory, a policy directory
/// (Hugging Face, with or without a LoRA adapter), a `.gguf` file, or `default`.
pub fn load_model(
    spec: &str,
    device: &pol::Device,
) -> anyhow::Result<(pol::LlamaModel, pol::Tokenizer, PathBuf)> {
    if spec == "default" {
        let loaded = pol::load_on(&pol::default_model_path(), device)?;
        return Ok((
            loaded.frozen_model()?.for_sampling()?,
            loaded.tokenizer.clone(),
            loaded.source.clone(),
        ));
    }
    let p = Path::new(spec);
    for dir in [
        p.join("checkpoint").join("policy"),
        p.join("policy"),
        p.to_path_buf(),
    ] {
        if dir.join("config.json").exists() && dir.join("model.safetensors").exists() {
            let policy = pol::Policy::from_pretrained_on(&dir, 0, device)
                .with_context(|| format!("failed to load {}", dir.display()))?;
            return Ok((policy.rollout_model()?, policy.tokenizer().clone(), dir));
        }
    }
    let loaded = pol::load_on(p, device).with_context(|| format!("failed to load model {spec}"))?;
    Ok((
        loaded.frozen_model()?.for_sampling()?,
        loaded.tokenizer.clone(),
        loaded.source.clone(),
    ))
}
