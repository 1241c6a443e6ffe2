//! Loading: configs and weights from disk, and errors that name the file.

use std::collections::HashMap;

use candle_core::D;

use super::*;

#[test]
fn qwen2_5_0_5b_config_parses_and_a_random_model_of_that_shape_runs() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models/qwen2.5-0.5b-instruct/config.json");
    let cfg = ModelConfig::from_json_file(&path).unwrap();
    assert_eq!(cfg.family(), Family::Qwen2);
    assert!(cfg.qkv_bias() && !cfg.o_bias() && cfg.tie_word_embeddings);
    assert_eq!(
        (cfg.num_kv_heads(), cfg.head_dim(), cfg.vocab_size),
        (2, 64, 151_936)
    );
    let weights = random_weights(&cfg, 0, &Device::Cpu).unwrap();
    let n: usize = weights.values().map(|t| t.elem_count()).sum();
    // 494M parameters with the tied embedding (Qwen2.5-0.5B model card: 0.49B).
    assert!((490_000_000..500_000_000).contains(&n), "{n}");
    let empty = HashMap::new();
    let model = LlamaModel::new(
        &cfg,
        &ModelParts {
            weights: &weights,
            adapters: &empty,
            frozen_base: true,
        },
    )
    .unwrap();
    let ids = Tensor::new(&[[151_644u32, 872, 198, 9707]], &Device::Cpu).unwrap();
    let mask = AttentionMask::new(&[vec![true; 4]], 4, &cfg, &Device::Cpu).unwrap();
    let h = model.forward_hidden(&ids, &mask, None).unwrap();
    assert_eq!(h.dims(), &[1, 4, 896]);
    let logits = model
        .lm_logits(&h.squeeze(0).unwrap().narrow(0, 3, 1).unwrap())
        .unwrap();
    assert_eq!(logits.dims(), &[1, 151_936]);
    assert!(
        scalar(
            &logits
                .abs()
                .unwrap()
                .max(D::Minus1)
                .unwrap()
                .squeeze(0)
                .unwrap()
        )
        .is_finite()
    );
}

#[test]
fn malformed_config_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(&p, r#"{"model_type": "llama", "vocab_size": 10}"#).unwrap();
    let e = ModelConfig::from_json_file(&p).unwrap_err().to_string();
    assert!(
        e.contains("config.json") && e.contains("hidden_size"),
        "{e}"
    );
    let e = load_on(dir.path(), &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
    let missing = dir.path().join("nope.gguf");
    let e = load_spec(missing.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.gguf"), "{e}");
    let e = PolicyError::ModelMissing {
        path: missing.clone(),
    }
    .to_string();
    assert!(
        e.contains("nope.gguf") && e.contains("scripts/setup.sh"),
        "{e}"
    );
    assert_eq!(resolve_model_path("default"), default_model_path());
    // A GGUF that is not one names the file.
    std::fs::write(&missing, b"not a gguf").unwrap();
    let e = load_on(&missing, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("nope.gguf"), "{e}");
}

/// A Hugging Face directory stored in bf16 (how PyTorch GPU runs usually save) loads as f32
/// master weights holding exactly the bf16 values.
#[test]
fn bf16_weights_on_disk_load_as_exact_f32() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = tiny_loaded(tiny_qwen_cfg(), 22);
    let bf16: HashMap<String, Tensor> = loaded
        .weights
        .iter()
        .map(|(k, t)| (k.clone(), t.to_dtype(DType::BF16).unwrap()))
        .collect();
    candle_core::safetensors::save(&bf16, dir.path().join("model.safetensors")).unwrap();
    let mut cfg = serde_json::to_value(&loaded.config).unwrap();
    cfg["torch_dtype"] = "bfloat16".into();
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    loaded.tokenizer.save(dir.path()).unwrap();
    let back = load_on(dir.path(), &Device::Cpu).unwrap();
    assert_eq!(back.weights.len(), loaded.weights.len());
    for (name, t) in &back.weights {
        assert_eq!(t.dtype(), DType::F32, "{name}");
        let want: Vec<f32> = bf16[name]
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
    }
}
