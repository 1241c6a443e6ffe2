//! Unit tests by topic (as in candle-nn's `tests/`), on a tiny random model built by the same
//! code as the real one, plus a few on the real default model (installed by `scripts/setup.sh`).
//! This file holds the shared helpers: the tiny tokenizer, configs, model and batch.

mod checkpoint;
mod flops;
mod fused;
mod gradients;
mod loading;
mod lora;
mod optim;
mod real_model;
mod recompute;
mod sampling;
mod shared_prefix;
mod stop_strings;
mod tokenizer;

use candle_core::{Device, Tensor};
use tokenizers::AddedToken;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use crate::*;

/// A byte-level tokenizer without merges (one token per byte) plus ChatML specials.
pub(crate) fn tiny_tokenizer() -> Tokenizer {
    byte_tokenizer(|_| true, &[])
}

/// A byte-level vocabulary: the ChatML specials, the byte characters `keep` accepts (sorted),
/// then `extra` tokens (GPT-2 spelling: `Ġ` is a space). No merges: encoding gives single bytes.
pub(crate) fn byte_tokenizer(keep: impl Fn(char) -> bool, extra: &[&str]) -> Tokenizer {
    let mut chars: Vec<char> = ByteLevel::alphabet()
        .into_iter()
        .filter(|c| keep(*c))
        .collect();
    chars.sort_unstable();
    let specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
    let mut vocab: tokenizers::models::bpe::Vocab = Default::default();
    let all = specials
        .iter()
        .map(|s| s.to_string())
        .chain(chars.iter().map(|c| c.to_string()))
        .chain(extra.iter().map(|s| s.to_string()));
    for (i, s) in all.enumerate() {
        vocab.insert(s, i as u32);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .unwrap();
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    tok.add_special_tokens(specials.map(|s| AddedToken::from(s, true)))
        .unwrap();
    Tokenizer::from_hf(tok, None).unwrap()
}

pub(crate) const TINY_VOCAB: usize = 259;

pub(crate) fn tiny_loaded(cfg: ModelConfig, seed: u64) -> LoadedModel {
    let weights = random_weights(&cfg, seed, &Device::Cpu).unwrap();
    LoadedModel {
        config: cfg,
        weights,
        tokenizer: tiny_tokenizer(),
        source: "tiny".into(),
    }
}

pub(crate) fn tiny_cfg() -> ModelConfig {
    ModelConfig::tiny(TINY_VOCAB)
}

/// Qwen2-style tiny config: q/k/v biases, untied lm_head.
fn tiny_qwen_cfg() -> ModelConfig {
    let mut c = ModelConfig::tiny(TINY_VOCAB);
    c.model_type = "qwen2".into();
    c.architectures = vec!["Qwen2ForCausalLM".into()];
    c.tie_word_embeddings = false;
    c
}

/// Two prompt+response rows of different lengths, right-padded.
fn tiny_batch() -> TokenBatch {
    let a: Vec<u32> = vec![1, 40, 41, 42, 43, 2, 1, 50, 51, 52, 53, 54, 2];
    let b: Vec<u32> = vec![1, 60, 61, 2, 1, 70, 71, 72, 2];
    let ma: Vec<u8> = (0..a.len()).map(|i| u8::from(i >= 7)).collect();
    let mb: Vec<u8> = (0..b.len()).map(|i| u8::from(i >= 5)).collect();
    TokenBatch::right_padded(&[(a, ma), (b, mb)], 2).unwrap()
}

/// Negative mean log-prob of the scored tokens (SFT loss), a scalar.
fn nll(model: &LlamaModel, batch: &TokenBatch) -> Tensor {
    let s = score(model, batch).unwrap();
    let n = s.mask.sum_all().unwrap();
    (s.logprobs.sum_all().unwrap().neg().unwrap() / n.to_scalar::<f32>().unwrap() as f64).unwrap()
}

fn scalar(t: &Tensor) -> f32 {
    t.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap()
}

/// Largest |x| of a tensor.
fn max_abs(t: &Tensor) -> f32 {
    scalar(&t.abs().unwrap().flatten_all().unwrap().max(0).unwrap())
}

/// AdamW with its defaults but the learning rate `lr`.
fn adamw(params: &[NamedParam], lr: f64) -> AdamW {
    AdamW::new(
        params,
        AdamWConfig {
            lr,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Every LoRA B of `policy` set to `value(i)` at flat index `i` (B starts at zero, which leaves
/// A without a gradient).
fn set_lora_b(policy: &Policy, value: impl Fn(usize) -> f32) {
    for p in policy.params().iter().filter(|p| p.name.contains("lora_B")) {
        let v: Vec<f32> = (0..p.var.elem_count()).map(&value).collect();
        p.var
            .set(&Tensor::from_vec(v, p.var.shape(), &Device::Cpu).unwrap())
            .unwrap();
    }
}
