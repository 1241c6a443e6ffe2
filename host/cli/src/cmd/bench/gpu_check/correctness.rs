//! The GPU check's correctness part: logits of the device in f32 against the CPU in f32;
//! per-token log-probs in bf16 against f32 on the device; sampler log-probs (KV cache, left
//! padding) against scorer log-probs (full sequences, right padding) in bf16 and f32.
//! The tolerances are those of `docs/gpu.md`, "The GPU check".

use std::path::Path;
use std::time::Instant;

use anyhow::Context;

use ragen_gym_policy::{
    self as pol, DType, Device, LlamaModel, LoadedModel, ModelParts, SamplingParams, Tensor,
    TokenBatch, Tokenizer,
};
use serde_json::{Value, json};

use super::workload::{Workload, random_ids, to_device};
use crate::cmd::bench::memory::MemoryProbe;

/// Largest |device - CPU| of f32 logits.
const TOL_LOGITS_F32: f64 = 1e-3;
/// Largest |bf16 - f32| of a token's log-prob, nats (also sampler vs scorer in bf16).
const TOL_LOGPROB_BF16: f64 = 0.05;
/// Largest |sampler - scorer| of a token's log-prob in f32, nats.
const TOL_SAMPLER_F32: f64 = 1e-3;

/// A model without trainable parts over `loaded`'s weights, computing in `dtype`.
fn frozen(loaded: &LoadedModel, dtype: DType) -> anyhow::Result<LlamaModel> {
    let adapters = Default::default();
    Ok(LlamaModel::new(
        &loaded.config,
        &ModelParts {
            weights: &loaded.weights,
            adapters: &adapters,
            frozen_base: true,
        },
    )?
    .with_compute_dtype(dtype))
}

/// Rows of random tokens of lengths `len`, `len - 5`, ..., right-padded, every real token after
/// the first scored.
fn check_batch(w: &Workload, state: &mut u64) -> anyhow::Result<TokenBatch> {
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = (0..w.check_rows)
        .map(|r| {
            let n = (w.check_len - 5 * r).max(2);
            let ids = random_ids(n, w.config.vocab_size, state);
            let mask = (0..n).map(|i| u8::from(i > 0)).collect();
            (ids, mask)
        })
        .collect();
    Ok(TokenBatch::right_padded(&seqs, 0)?)
}

/// Logits at every real token position: [N, V] f32 on the CPU.
fn logits_at_real_positions(model: &LlamaModel, batch: &TokenBatch) -> anyhow::Result<Tensor> {
    let h = pol::hidden_states(model, batch)?;
    let (b, t, d) = h.dims3()?;
    let rows: Vec<u32> = batch
        .attention_mask
        .iter()
        .enumerate()
        .flat_map(|(r, m)| {
            m.iter()
                .enumerate()
                .filter(|(_, x)| **x != 0)
                .map(move |(p, _)| (r * t + p) as u32)
        })
        .collect();
    let idx = Tensor::new(rows.as_slice(), h.device())?;
    let h = h.reshape((b * t, d))?.index_select(&idx, 0)?;
    Ok(model.lm_logits(&h)?.to_device(&Device::Cpu)?)
}

/// Largest and mean |a - b| over the scored positions of `mask`.
fn masked_diff(a: &Tensor, b: &Tensor, mask: &Tensor) -> anyhow::Result<(f64, f64)> {
    let a: Vec<f32> = a.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?;
    let b: Vec<f32> = b.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?;
    let m: Vec<f32> = mask.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?;
    let (mut max, mut sum, mut n) = (0.0f64, 0.0f64, 0usize);
    for ((x, y), k) in a.iter().zip(&b).zip(&m) {
        if *k > 0.0 {
            let d = f64::from((x - y).abs());
            max = max.max(d);
            sum += d;
            n += 1;
        }
    }
    Ok((max, sum / n.max(1) as f64))
}

/// Sample from `model`, score prompt + sample with the same model, compare per-token log-probs.
fn sampler_vs_scorer(
    model: &LlamaModel,
    tok: &Tokenizer,
    prompts: &[Vec<u32>],
    new_tokens: usize,
    seed: u64,
) -> anyhow::Result<Value> {
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: new_tokens,
        seed,
        ..Default::default()
    };
    let samples = pol::sample(model, tok, prompts, &params)?;
    let responses: Vec<Vec<u32>> = samples.iter().map(|s| s.tokens.clone()).collect();
    let batch = TokenBatch::prompts_and_responses(prompts, &responses, 0)?;
    let lp: Vec<Vec<f32>> = pol::score(model, &batch)?
        .logprobs
        .to_device(&Device::Cpu)?
        .to_vec2()?;
    let (mut max, mut sum, mut n) = (0.0f64, 0.0f64, 0usize);
    for (r, (p, s)) in prompts.iter().zip(&samples).enumerate() {
        for (j, x) in s.logprobs.iter().enumerate() {
            let d = f64::from((x - lp[r][p.len() - 1 + j]).abs());
            max = max.max(d);
            sum += d;
            n += 1;
        }
    }
    Ok(json!({
        "tokens_compared": n,
        "max_abs_diff": max,
        "mean_abs_diff": sum / n.max(1) as f64,
    }))
}

/// The correctness part: f32 logits on the device against the CPU, bf16 log-probs against f32,
/// and sampler log-probs against scorer log-probs, each with its tolerance and `pass`.
/// Off the CPU it also leaves `OUT/parity/` for `scripts/gpu_check.py parity`: the model
/// (`model/`, Hugging Face layout), the rows (`batch.json`) and both f32 logits
/// (`logits-cpu.safetensors`, `logits-device.safetensors`: tensor `logits`, [positions, V]),
/// so PyTorch's own CPU and CUDA f32 logits of the same weights can be set beside ours.
pub(super) fn correctness(w: &Workload, device: &Device, out: &Path) -> anyhow::Result<Value> {
    let mem = MemoryProbe::start(device);
    let mut state = w.seed ^ 0xc0de;
    let batch = check_batch(w, &mut state)?;
    let cpu = w.loaded(&Device::Cpu)?;
    let on_device = LoadedModel {
        weights: to_device(&cpu.weights, device)?,
        ..cpu.clone()
    };
    // (a1) f32 logits, device vs CPU.
    let t = Instant::now();
    let reference = logits_at_real_positions(&frozen(&cpu, DType::F32)?, &batch)?;
    let cpu_s = t.elapsed().as_secs_f64();
    let dev32 = frozen(&on_device, DType::F32)?;
    let got = logits_at_real_positions(&dev32, &batch)?;
    let max_diff = f64::from((&got - &reference)?.abs()?.max_all()?.to_scalar::<f32>()?);
    let max_logit = f64::from(reference.abs()?.max_all()?.to_scalar::<f32>()?);
    if !device.is_cpu() {
        write_parity(out, &cpu, &batch, &reference, &got)?;
    }
    // (a2) per-token log-probs, bf16 vs f32 on the device (bf16 is the GPU's compute dtype; on
    // the CPU this forces it, to check the same precision path).
    let dev16 = dev32.with_compute_dtype(DType::BF16);
    let s32 = pol::score(&dev32, &batch)?;
    let s16 = pol::score(&dev16, &batch)?;
    let (lp_max, lp_mean) = masked_diff(&s16.logprobs, &s32.logprobs, &s32.mask)?;
    // (a3) sampler vs scorer.
    let prompts: Vec<Vec<u32>> = batch
        .input_ids
        .iter()
        .zip(&batch.attention_mask)
        .map(|(ids, m)| {
            let n = m.iter().filter(|x| **x != 0).count();
            ids[..n / 2].to_vec()
        })
        .collect();
    let tok = &cpu.tokenizer;
    let ss16 = sampler_vs_scorer(&dev16, tok, &prompts, w.check_new_tokens, w.seed)?;
    let ss32 = sampler_vs_scorer(&dev32, tok, &prompts, w.check_new_tokens, w.seed)?;
    let checks = json!({
        "logits_f32_vs_cpu": {
            "max_abs_diff": max_diff,
            "max_abs_logit": max_logit,
            "positions": reference.dim(0)?,
            "tolerance": TOL_LOGITS_F32,
            "pass": max_diff <= TOL_LOGITS_F32,
            "same_device": device.is_cpu(),
            "cpu_forward_s": cpu_s,
        },
        "logprobs_bf16_vs_f32": {
            "max_abs_diff_nats": lp_max,
            "mean_abs_diff_nats": lp_mean,
            "tolerance": TOL_LOGPROB_BF16,
            "pass": lp_max <= TOL_LOGPROB_BF16,
        },
        "sampler_vs_scorer_bf16": with_pass(ss16, TOL_LOGPROB_BF16),
        "sampler_vs_scorer_f32": with_pass(ss32, TOL_SAMPLER_F32),
    });
    let pass = checks
        .as_object()
        .into_iter()
        .flatten()
        .all(|(_, c)| c["pass"] == Value::Bool(true));
    Ok(json!({ "checks": checks, "pass": pass, "memory": mem.finish().json() }))
}

/// The files of `scripts/gpu_check.py parity` under `OUT/parity/`.
fn write_parity(
    out: &Path,
    cpu: &LoadedModel,
    batch: &TokenBatch,
    reference: &Tensor,
    got: &Tensor,
) -> anyhow::Result<()> {
    let dir = out.join("parity");
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    cpu.save_pretrained(&dir.join("model"))?;
    let rows: Vec<Vec<u32>> = batch
        .input_ids
        .iter()
        .zip(&batch.attention_mask)
        .map(|(ids, m)| ids[..m.iter().filter(|x| **x != 0).count()].to_vec())
        .collect();
    let path = dir.join("batch.json");
    std::fs::write(&path, serde_json::to_string(&json!({ "rows": rows }))?)
        .with_context(|| format!("failed to write {}", path.display()))?;
    for (name, t) in [("cpu", reference), ("device", got)] {
        let path = dir.join(format!("logits-{name}.safetensors"));
        t.save_safetensors("logits", &path)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

fn with_pass(mut v: Value, tol: f64) -> Value {
    let max = v["max_abs_diff"].as_f64().unwrap_or(f64::INFINITY);
    v["tolerance"] = tol.into();
    v["pass"] = (max <= tol).into();
    v
}
