//! Loading models: a GGUF file (dequantised to f32, q/k rows un-permuted) or a Hugging Face
//! directory (`config.json`, `*.safetensors`, `tokenizer.json`); the default model's location.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::ModelConfig;
use crate::model::{LlamaModel, ModelParts, Weights, layer_projection_paths, projection_shapes};
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// File name of the default model inside `<cache>/models/`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The ragen-gym cache: `$RAGEN_GYM_CACHE`, else `$HOME/.cache/ragen-gym`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RAGEN_GYM_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("ragen-gym")
}

/// Where `scripts/setup.sh` installs the default model (SmolLM2-135M-Instruct, Q4_1 GGUF).
pub fn default_model_path() -> PathBuf {
    cache_dir().join("models").join(DEFAULT_MODEL_FILE)
}

/// A model read from disk: config, f32 weights under Hugging Face names, tokenizer.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    /// Hyper-parameters.
    pub config: ModelConfig,
    /// Weights (plain tensors, no autograd) under Hugging Face names.
    pub weights: Weights,
    /// Tokenizer with ChatML rendering.
    pub tokenizer: Tokenizer,
    /// The file or directory it came from.
    pub source: PathBuf,
}

impl LoadedModel {
    /// A model with no trainable parts built from these weights (sampling, evaluation).
    ///
    /// # Errors
    /// Missing or mis-shaped tensors.
    pub fn frozen_model(&self) -> Result<LlamaModel> {
        let adapters = Default::default();
        LlamaModel::new(
            &self.config,
            &ModelParts {
                weights: &self.weights,
                adapters: &adapters,
                frozen_base: true,
            },
        )
    }
}

impl LoadedModel {
    /// Write the model as a Hugging Face directory (`model.safetensors` in f32, `config.json`,
    /// `tokenizer.json`) into `dir`, which must exist; [`load`] reads it back.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        crate::hf_dir::write_hf_dir(dir, &self.config, &self.weights, &self.tokenizer)
    }
}

/// Resolve a model setting: `"default"` (or empty) is [`default_model_path`], anything else a
/// path to a `.gguf` file or a Hugging Face directory.
pub fn resolve_model_path(spec: &str) -> PathBuf {
    if spec.is_empty() || spec == "default" {
        default_model_path()
    } else {
        PathBuf::from(spec)
    }
}

/// Load a model named by a setting (see [`resolve_model_path`]); a missing default model gives
/// [`PolicyError::ModelMissing`] naming the path and the set-up script.
///
/// # Errors
/// See [`load`].
pub fn load_spec(spec: &str) -> Result<LoadedModel> {
    let path = resolve_model_path(spec);
    if path == default_model_path() && !path.exists() {
        return Err(PolicyError::ModelMissing { path });
    }
    load(&path)
}

/// Load the default model, or fail with [`PolicyError::ModelMissing`] naming its path.
///
/// # Errors
/// See [`load`].
pub fn load_default() -> Result<LoadedModel> {
    let path = default_model_path();
    if !path.exists() {
        return Err(PolicyError::ModelMissing { path });
    }
    load(&path)
}

/// Only the tokenizer of a model (a `.gguf` file or a Hugging Face directory), without reading
/// its weights: for building new models over the same vocabulary (tests, tools).
///
/// # Errors
/// [`PolicyError::InvalidModel`] / [`PolicyError::Io`] naming the offending file.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    if path.is_dir() {
        return Tokenizer::from_file(&path.join("tokenizer.json"));
    }
    let mut file = std::fs::File::open(path).map_err(|e| PolicyError::io(path, e))?;
    let ct = gguf_file::Content::read(&mut file)
        .map_err(|e| PolicyError::invalid_model(path, format!("not a gguf file: {e}")))?;
    Tokenizer::from_gguf(&ct).map_err(|e| PolicyError::invalid_model(path, e.to_string()))
}

/// Load a `.gguf` file or a Hugging Face directory onto [`crate::default_device`].
///
/// # Errors
/// [`PolicyError::InvalidModel`] / [`PolicyError::Io`] naming the offending file.
pub fn load(path: &Path) -> Result<LoadedModel> {
    load_on(path, &crate::default_device()?)
}

/// Like [`load`], on the given device.
///
/// # Errors
/// See [`load`]; a missing default model gives [`PolicyError::ModelMissing`].
pub fn load_on(path: &Path, device: &Device) -> Result<LoadedModel> {
    if path == default_model_path() && !path.exists() {
        return Err(PolicyError::ModelMissing {
            path: path.to_path_buf(),
        });
    }
    let meta = std::fs::metadata(path).map_err(|e| PolicyError::io(path, e))?;
    let loaded = if meta.is_dir() {
        load_hf_dir(path, device)?
    } else {
        load_gguf(path, device)?
    };
    // Build once to check every tensor the architecture needs (names and shapes).
    loaded
        .frozen_model()
        .map_err(|e| PolicyError::invalid_model(path, e.to_string()))?;
    Ok(loaded)
}

fn load_hf_dir(dir: &Path, device: &Device) -> Result<LoadedModel> {
    let config = ModelConfig::from_json_file(&dir.join("config.json"))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| PolicyError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "safetensors")
                && p.file_name().is_some_and(|n| n != "optimizer.safetensors")
                && p.file_name()
                    .is_some_and(|n| n != "adapter_model.safetensors")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(PolicyError::invalid_model(
            dir,
            "no *.safetensors weight file",
        ));
    }
    let mut weights = Weights::new();
    for f in &files {
        let tensors = candle_core::safetensors::load(f, device)
            .map_err(|e| PolicyError::invalid_model(f, e.to_string()))?;
        for (name, t) in tensors {
            weights.insert(name, t.to_dtype(DType::F32)?);
        }
    }
    if config.tie_word_embeddings {
        weights.remove("lm_head.weight");
    }
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    Ok(LoadedModel {
        config,
        weights,
        tokenizer,
        source: dir.to_path_buf(),
    })
}

/// GGUF tensor name -> Hugging Face name.
fn gguf_to_hf(name: &str) -> Option<String> {
    match name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    let hf = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undo llama.cpp's q/k row permutation (made for interleaved RoPE) so Hugging Face
/// `rotate_half` RoPE applies: rows [n_head, 2, hd/2] <- [n_head, hd/2, 2]. Works for weights
/// [out, in] and biases [out].
fn unpermute_qk(t: &Tensor, n_head: usize) -> Result<Tensor> {
    let dims = t.dims().to_vec();
    let out = dims[0];
    let hd = out / n_head;
    let inner: usize = dims[1..].iter().product();
    let r = t
        .reshape((n_head, hd / 2, 2, inner))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)?;
    Ok(r)
}

fn load_gguf(path: &Path, device: &Device) -> Result<LoadedModel> {
    let bad = |reason: String| PolicyError::invalid_model(path, reason);
    let mut file = std::fs::File::open(path).map_err(|e| PolicyError::io(path, e))?;
    let ct =
        gguf_file::Content::read(&mut file).map_err(|e| bad(format!("not a gguf file: {e}")))?;
    let config = gguf_config(&ct).map_err(bad)?;
    config.validate().map_err(bad)?;
    let mut weights = Weights::new();
    let names: Vec<String> = ct.tensor_infos.keys().cloned().collect();
    for name in names {
        let Some(hf) = gguf_to_hf(&name) else {
            tracing::debug!(tensor = %name, "ignoring gguf tensor");
            continue;
        };
        let qt = ct
            .tensor(&mut file, &name, device)
            .map_err(|e| bad(format!("tensor {name}: {e}")))?;
        let mut t = qt.dequantize(device)?.to_dtype(DType::F32)?;
        if config.model_type == "llama" {
            if hf.contains("self_attn.q_proj") {
                t = unpermute_qk(&t, config.num_attention_heads)?;
            } else if hf.contains("self_attn.k_proj") {
                t = unpermute_qk(&t, config.num_kv_heads())?;
            }
        }
        weights.insert(hf, t);
    }
    let tokenizer = Tokenizer::from_gguf(&ct).map_err(|e| bad(e.to_string()))?;
    Ok(LoadedModel {
        config,
        weights,
        tokenizer,
        source: path.to_path_buf(),
    })
}

/// The model config a GGUF file's metadata (`{arch}.*`) and tensor shapes describe; the error
/// says what is missing or unsupported.
fn gguf_config(ct: &gguf_file::Content) -> std::result::Result<ModelConfig, String> {
    let md = &ct.metadata;
    let arch = md
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or("metadata lacks general.architecture")?;
    if !matches!(arch.as_str(), "llama" | "qwen2") {
        return Err(format!(
            "architecture {arch:?} is not supported (llama, qwen2)"
        ));
    }
    let get_u = |key: &str| -> std::result::Result<usize, String> {
        let k = format!("{arch}.{key}");
        md.get(&k)
            .ok_or_else(|| format!("metadata lacks {k}"))?
            .to_u32()
            .map(|v| v as usize)
            .map_err(|e| format!("{k}: {e}"))
    };
    let get_f = |key: &str, default: f64| -> f64 {
        md.get(&format!("{arch}.{key}"))
            .and_then(|v| v.to_f32().ok())
            .map_or(default, f64::from)
    };
    let n_head = get_u("attention.head_count")?;
    let embd = ct
        .tensor_infos
        .get("token_embd.weight")
        .ok_or("no token_embd.weight tensor")?;
    Ok(ModelConfig {
        architectures: vec![
            if arch == "qwen2" {
                "Qwen2ForCausalLM"
            } else {
                "LlamaForCausalLM"
            }
            .into(),
        ],
        model_type: arch.clone(),
        vocab_size: embd.shape.dims()[0],
        hidden_size: get_u("embedding_length")?,
        intermediate_size: get_u("feed_forward_length")?,
        num_hidden_layers: get_u("block_count")?,
        num_attention_heads: n_head,
        num_key_value_heads: Some(get_u("attention.head_count_kv").unwrap_or(n_head)),
        head_dim: None,
        rms_norm_eps: get_f("attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta: get_f("rope.freq_base", 10_000.0),
        max_position_embeddings: get_u("context_length").unwrap_or(4096),
        tie_word_embeddings: !ct.tensor_infos.contains_key("output.weight"),
        attention_bias: None,
        bos_token_id: md
            .get("tokenizer.ggml.bos_token_id")
            .and_then(|v| v.to_u32().ok()),
    })
}

/// Randomly initialised weights for `cfg` (Hugging Face names), seeded: matrices uniform with
/// standard deviation 0.02 (HF `initializer_range`), norms 1, biases 0.
///
/// # Errors
/// Allocation failures.
pub fn random_weights(cfg: &ModelConfig, seed: u64, device: &Device) -> Result<Weights> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let half_width = 0.02 * 3f32.sqrt();
    let mut mat = |rows: usize, cols: usize| -> Result<Tensor> {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * half_width)
            .collect();
        Ok(Tensor::from_vec(v, (rows, cols), device)?)
    };
    let d = cfg.hidden_size;
    let mut w = Weights::new();
    w.insert("model.embed_tokens.weight".into(), mat(cfg.vocab_size, d)?);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{i}");
        for ((path, _), s) in layer_projection_paths(i)
            .into_iter()
            .zip(projection_shapes(cfg))
        {
            w.insert(format!("{path}.weight"), mat(s.output, s.input)?);
            if s.bias {
                w.insert(
                    format!("{path}.bias"),
                    Tensor::zeros(s.output, DType::F32, device)?,
                );
            }
        }
        w.insert(
            format!("{p}.input_layernorm.weight"),
            Tensor::ones(d, DType::F32, device)?,
        );
        w.insert(
            format!("{p}.post_attention_layernorm.weight"),
            Tensor::ones(d, DType::F32, device)?,
        );
    }
    w.insert(
        "model.norm.weight".into(),
        Tensor::ones(d, DType::F32, device)?,
    );
    if !cfg.tie_word_embeddings {
        w.insert("lm_head.weight".into(), mat(cfg.vocab_size, d)?);
    }
    Ok(w)
}
