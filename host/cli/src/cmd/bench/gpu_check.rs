//! `ragen-gym bench gpu-check --out DIR`: the one-run GPU check (#11, docs/gpu.md) on a model of
//! Qwen2.5-0.5B's shape (its `config.json`) with seeded random weights and a synthetic tokenizer
//! of the same vocabulary size, so nothing but the binary has to reach the GPU machine.
//!
//! Parts, each writing `DIR/rust-<part>.json` (`--part all` runs them in one process):
//! - `workload`: the sizes below as `DIR/workload.json`, read by the PyTorch anchor
//!   (`scripts/gpu_check.py`) so both sides do the same work;
//! - `correctness`: logits of the device in f32 against the CPU in f32 (within 1e-3); per-token
//!   log-probs in bf16 against f32 on the device (within 0.05 nats); sampler log-probs (KV cache,
//!   left padding) against scorer log-probs (full sequences, right padding) in bf16 and f32;
//! - `sampling`: batched sampling throughput (the anchor runs Hugging Face `generate`);
//! - `train-step`: one optimiser step (micro-batches of one sequence, AdamW) in full fine-tuning
//!   and LoRA;
//! - `iteration-full`, `iteration-lora`: one RAGEN-shaped StarPO-S iteration on Sokoban (8 groups x
//!   16 rollouts, 5 turns, 400 tokens per turn) through the real trainer, with its time breakdown.
//!
//! Every part records peak memory: device memory in use (driver view) on a GPU, peak RSS on the
//! CPU. scripts/gpu-check.sh runs each part as its own process under a time limit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use ragen_gym_core::splitmix64;
use ragen_gym_policy::{
    self as pol, AdamW, AdamWConfig, DType, Device, LlamaModel, LoadedModel, LoraConfig,
    ModelConfig, ModelParts, ParamGrads, Policy, SamplingParams, Tensor, TokenBatch, Tokenizer,
    Trainable,
};
use ragen_gym_starpo::{ConfigBuilder, Profile, ReportError, TrainEvent, TrainSetup, Trainer};
use serde::Serialize;
use serde_json::{Value, json};

use super::policy::{peak_rss_mib, reset_peak_rss};
use crate::cmd::device_args::DeviceArgs;
use crate::cmd::plugin_args::{SandboxArgs, env_factory, load};
use crate::cmd::run_config::env_preset;

/// Qwen2.5-0.5B-Instruct's `config.json` (hidden 896, 24 layers, 14 heads, 2 KV heads, FFN 4864,
/// vocab 151,936, tied embeddings).
const QWEN2_5_0_5B_CONFIG: &str =
    include_str!("../../../../../tests/fixtures/models/qwen2.5-0.5b-instruct/config.json");

/// Tolerances of the correctness part (#11).
const TOL_LOGITS_F32: f64 = 1e-3;
const TOL_LOGPROB_BF16: f64 = 0.05;
const TOL_SAMPLER_F32: f64 = 1e-3;

/// The model shape.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Qwen2.5-0.5B (RAGEN's model), the GPU check proper.
    #[value(name = "qwen2.5-0.5b")]
    Qwen2_5_0_5b,
    /// A 2-layer model and small workloads: the CPU fallback and its test.
    Tiny,
}

/// What to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every part below, in one process.
    All,
    /// Only write `workload.json`.
    Workload,
    /// Logits and log-prob agreement.
    Correctness,
    /// Batched sampling throughput.
    Sampling,
    /// One optimiser step, full fine-tuning and LoRA.
    TrainStep,
    /// One RAGEN-shaped iteration with full fine-tuning.
    IterationFull,
    /// One RAGEN-shaped iteration with LoRA.
    IterationLora,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::All => "all",
            Part::Workload => "workload",
            Part::Correctness => "correctness",
            Part::Sampling => "sampling",
            Part::TrainStep => "train-step",
            Part::IterationFull => "iteration-full",
            Part::IterationLora => "iteration-lora",
        }
    }
}

/// Arguments of `bench gpu-check`.
#[derive(clap::Args)]
pub struct GpuCheckArgs {
    /// Folder for the JSON reports (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Model shape (random weights).
    #[arg(long, value_enum, default_value = "qwen2.5-0.5b")]
    pub shape: Shape,
    /// Which part to run.
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Seed of the weights, token ids and samplers.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where the model runs (the CPU reference of the correctness part always runs on the CPU).
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// The work both sides do; `workload.json`.
#[derive(Debug, Clone, Serialize)]
struct Workload {
    shape: &'static str,
    seed: u64,
    config: ModelConfig,
    /// Correctness: rows of random tokens (lengths `check_len` minus 0, 5, 10, ...).
    check_rows: usize,
    check_len: usize,
    /// Correctness: tokens sampled per row for the sampler/scorer comparison.
    check_new_tokens: usize,
    /// Sampling throughput: batch, prompt tokens, new tokens (temperature 1, no stop).
    sample_batch: usize,
    sample_prompt_len: usize,
    sample_new_tokens: usize,
    /// Training step: sequences of `train_len` tokens, one per micro-batch, one AdamW step.
    train_seqs: usize,
    train_len: usize,
    /// LoRA (RAGEN `base-lora.yaml`: rank 64, alpha 64, all linear layers).
    lora_rank: usize,
    lora_alpha: f64,
    /// Config overrides of the iteration (on top of `configs/default.toml` + the Sokoban preset).
    iteration: Vec<String>,
}

impl Workload {
    fn new(shape: Shape, seed: u64) -> anyhow::Result<Self> {
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

    fn loaded(&self, device: &Device) -> anyhow::Result<LoadedModel> {
        let weights = pol::random_weights(&self.config, self.seed, &Device::Cpu)?;
        let weights = to_device(&weights, device)?;
        Ok(LoadedModel {
            config: self.config.clone(),
            weights,
            tokenizer: Tokenizer::synthetic(self.config.vocab_size)?,
            source: PathBuf::from(format!("random:{}:seed={}", self.shape, self.seed)),
        })
    }

    fn lora(&self) -> Trainable {
        Trainable::Lora(LoraConfig {
            rank: self.lora_rank,
            alpha: self.lora_alpha,
            ..LoraConfig::default()
        })
    }
}

fn to_device(w: &pol::Weights, device: &Device) -> anyhow::Result<pol::Weights> {
    w.iter()
        .map(|(k, t)| Ok((k.clone(), t.to_device(device)?)))
        .collect()
}

/// Seeded token ids in `[3, vocab)` (no ChatML control tokens).
fn random_ids(n: usize, vocab: usize, state: &mut u64) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let x = splitmix64(state);
            3 + (x % (vocab as u64 - 3)) as u32
        })
        .collect()
}

/// Samples device memory in use every few milliseconds on a GPU; peak RSS on the CPU.
struct MemoryMonitor {
    device: Device,
    baseline: Option<u64>,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MemoryMonitor {
    fn start(device: &Device) -> Self {
        reset_peak_rss();
        let baseline = pol::device_memory_used(device);
        let peak = Arc::new(AtomicU64::new(baseline.unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = baseline.map(|_| {
            let (device, peak, stop) = (device.clone(), peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(used) = pol::device_memory_used(&device) {
                        peak.fetch_max(used, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        });
        Self {
            device: device.clone(),
            baseline,
            peak,
            stop,
            thread,
        }
    }

    fn finish(mut self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(used) = pol::device_memory_used(&self.device) {
            self.peak.fetch_max(used, Ordering::Relaxed);
        }
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        match self.baseline {
            Some(base) => json!({
                "device_peak_mib": mib(self.peak.load(Ordering::Relaxed)),
                "device_baseline_mib": mib(base),
                "device_peak_above_baseline_mib":
                    mib(self.peak.load(Ordering::Relaxed).saturating_sub(base)),
                "host_peak_rss_mib": peak_rss_mib(),
            }),
            None => json!({ "host_peak_rss_mib": peak_rss_mib() }),
        }
    }
}

fn sync(device: &Device) -> anyhow::Result<()> {
    device.synchronize()?;
    Ok(())
}

/// Run the GPU check (or one part of it). Failed correctness checks exit with
/// [`crate::exit_code::CHECKS_FAILED`] after the report is written.
pub fn run(args: GpuCheckArgs) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let w = Workload::new(args.shape, args.seed)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("failed to create {}", args.out.display()))?;
    let parts: Vec<Part> = match args.part {
        Part::All => vec![
            Part::Workload,
            Part::Correctness,
            Part::Sampling,
            Part::TrainStep,
            Part::IterationFull,
            Part::IterationLora,
        ],
        p => vec![p],
    };
    let (mut failed, mut total) = (0, 0);
    for part in parts {
        let t = Instant::now();
        let mut v = match part {
            Part::Workload => workload_json(&w, &device)?,
            Part::Correctness => correctness(&w, &device)?,
            Part::Sampling => sampling(&w, &device)?,
            Part::TrainStep => train_step(&w, &device)?,
            Part::IterationFull => iteration(&w, &device, false, &args.out)?,
            Part::IterationLora => iteration(&w, &device, true, &args.out)?,
            Part::All => unreachable!("expanded above"),
        };
        v["part"] = part.name().into();
        v["device"] = pol::device_label(&device).into();
        v["shape"] = w.shape.into();
        v["wall_s"] = t.elapsed().as_secs_f64().into();
        for (_, check) in v["checks"].as_object().into_iter().flatten() {
            total += 1;
            failed += usize::from(check["pass"] != Value::Bool(true));
        }
        let name = if part == Part::Workload {
            "workload.json".to_string()
        } else {
            format!("rust-{}.json", part.name())
        };
        write_json_atomic(&args.out.join(name), &v)?;
        eprintln!(
            "gpu-check {}: {:.1} s",
            part.name(),
            t.elapsed().as_secs_f64()
        );
    }
    if failed > 0 {
        return Err(crate::ExpectedError::ChecksFailed {
            env_id: "gpu-check correctness".into(),
            failed,
            total,
        }
        .into());
    }
    Ok(())
}

fn write_json_atomic(path: &Path, v: &Value) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(v)?)
        .with_context(|| format!("failed to write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(())
}

fn workload_json(w: &Workload, device: &Device) -> anyhow::Result<Value> {
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

fn correctness(w: &Workload, device: &Device) -> anyhow::Result<Value> {
    let mem = MemoryMonitor::start(device);
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
    Ok(json!({ "checks": checks, "pass": pass, "memory": mem.finish() }))
}

fn with_pass(mut v: Value, tol: f64) -> Value {
    let max = v["max_abs_diff"].as_f64().unwrap_or(f64::INFINITY);
    v["tolerance"] = tol.into();
    v["pass"] = (max <= tol).into();
    v
}

fn sampling(w: &Workload, device: &Device) -> anyhow::Result<Value> {
    let loaded = w.loaded(device)?;
    let model = loaded.frozen_model()?;
    let mut state = w.seed ^ 0x5a3b;
    let prompts: Vec<Vec<u32>> = (0..w.sample_batch)
        .map(|_| random_ids(w.sample_prompt_len, w.config.vocab_size, &mut state))
        .collect();
    let params = |n: usize| SamplingParams {
        temperature: 1.0,
        max_new_tokens: n,
        seed: w.seed,
        ..Default::default()
    };
    // Warm-up (kernel modules, cuBLAS handles, allocator pools), not timed.
    pol::sample(&model, &loaded.tokenizer, &prompts[..1], &params(2))?;
    sync(device)?;
    let mem = MemoryMonitor::start(device);
    let t = Instant::now();
    let out = pol::sample(
        &model,
        &loaded.tokenizer,
        &prompts,
        &params(w.sample_new_tokens),
    )?;
    sync(device)?;
    let secs = t.elapsed().as_secs_f64();
    let generated: usize = out.iter().map(|s| s.tokens.len()).sum();
    let steps = out.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
    Ok(json!({
        "batch": w.sample_batch,
        "prompt_tokens": w.sample_prompt_len,
        "max_new_tokens": w.sample_new_tokens,
        "generated_tokens": generated,
        "seconds": secs,
        "tokens_per_s": generated as f64 / secs,
        "ms_per_step": 1e3 * secs / steps.max(1) as f64,
        "compute_dtype": format!("{:?}", model.compute_dtype()).to_lowercase(),
        "memory": mem.finish(),
    }))
}

fn train_step(w: &Workload, device: &Device) -> anyhow::Result<Value> {
    let loaded = w.loaded(device)?;
    let mut state = w.seed ^ 0x7a1e;
    let batches: Vec<TokenBatch> = (0..w.train_seqs)
        .map(|_| {
            let ids = random_ids(w.train_len, w.config.vocab_size, &mut state);
            let mask = (0..w.train_len).map(|i| u8::from(i > 0)).collect();
            TokenBatch::right_padded(&[(ids, mask)], 0)
        })
        .collect::<Result<_, _>>()?;
    let mut modes = Vec::new();
    for (name, trainable) in [("full", Trainable::Full), ("lora", w.lora())] {
        let mem = MemoryMonitor::start(device);
        let policy = Policy::new(&loaded, trainable, w.seed)?;
        let mut opt = AdamW::new(policy.params(), AdamWConfig::default())?;
        let mut step = || -> anyhow::Result<(f64, f64, f64)> {
            let (mut fwd, mut bwd) = (0.0, 0.0);
            let mut grads: Option<ParamGrads> = None;
            for batch in &batches {
                let t = Instant::now();
                let s = pol::score(policy.model(), batch)?;
                let n = batch.num_scored() as f64;
                // Policy-gradient-shaped loss: -mean log-prob - 0.001 mean entropy, averaged over
                // the micro-batches (gradient accumulation).
                let loss = ((s.logprobs.sum_all()? + s.entropy.sum_all()?.affine(0.001, 0.0)?)?
                    .affine(-1.0 / (n * batches.len() as f64), 0.0))?;
                sync(device)?;
                fwd += t.elapsed().as_secs_f64();
                let t = Instant::now();
                let store = loss.backward()?;
                match &mut grads {
                    None => grads = Some(ParamGrads::from_store(store, policy.params())),
                    Some(g) => g.accumulate(store, policy.params())?,
                }
                sync(device)?;
                bwd += t.elapsed().as_secs_f64();
            }
            let t = Instant::now();
            let mut g = grads.context("no micro-batches")?;
            pol::clip_grad_norm(&mut g, 1.0)?;
            opt.step(&g, 1e-6)?;
            sync(device)?;
            Ok((fwd, bwd, t.elapsed().as_secs_f64()))
        };
        let warm = step()?;
        let (fwd, bwd, optim) = step()?;
        let total = fwd + bwd + optim;
        let tokens = w.train_seqs * w.train_len;
        modes.push(json!({
            "mode": name,
            "trainable_params": policy.num_trainable(),
            "sequences": w.train_seqs,
            "seq_len": w.train_len,
            "tokens": tokens,
            "warmup_step_s": warm.0 + warm.1 + warm.2,
            "forward_s": fwd,
            "backward_s": bwd,
            "optimizer_s": optim,
            "step_s": total,
            "tokens_per_s": tokens as f64 / total,
            "memory": mem.finish(),
        }));
    }
    Ok(json!({ "modes": modes }))
}

fn iteration(w: &Workload, device: &Device, lora: bool, out: &Path) -> anyhow::Result<Value> {
    let mode = if lora { "lora" } else { "full" };
    let scratch =
        std::env::temp_dir().join(format!("ragen-gym-gpu-check-{}-{mode}", std::process::id()));
    let model_dir = scratch.join("model");
    std::fs::create_dir_all(&model_dir)
        .with_context(|| format!("failed to create {}", model_dir.display()))?;
    let result = (|| -> anyhow::Result<Value> {
        let t = Instant::now();
        w.loaded(&Device::Cpu)?.save_pretrained(&model_dir)?;
        let write_s = t.elapsed().as_secs_f64();
        let mut b = ConfigBuilder::new();
        if let Some(preset) = env_preset("sokoban") {
            b = b.layer_preset(preset, Profile::Full)?;
        }
        let mut overrides = w.iteration.clone();
        // RAGEN samples freely; the Sokoban preset's constrained decoding (#9) is a CPU-profile
        // aid, and the synthetic tokenizer's byte vocabulary is not what it is built for.
        overrides.push("rollout.constrained_actions=false".into());
        overrides.push(format!("model.path=\"{}\"", model_dir.display()));
        overrides.push("trainer.total_training_steps=1".into());
        if lora {
            overrides.push(format!("model.lora_rank={}", w.lora_rank));
            overrides.push(format!("model.lora_alpha={:?}", w.lora_alpha));
        } else {
            overrides.push("model.lora_rank=0".into());
        }
        for o in &overrides {
            b = b.layer_override(o)?;
        }
        let config = b.build()?;
        let live = config.train_batch_size()
            + config.es_manager.val.env_groups * config.es_manager.val.group_size;
        let sandbox = SandboxArgs {
            max_instances: Some(u32::try_from(live + 16).unwrap_or(u32::MAX)),
            ..SandboxArgs::default()
        };
        let plugin = load("sokoban", &sandbox)?;
        let sha = plugin.info().sha256.clone();
        let make_env = env_factory(plugin, config.env.config.clone(), Default::default());
        let t = Instant::now();
        let mut trainer = Trainer::new(TrainSetup {
            config,
            make_env,
            plugin_sha256: sha,
            env_source: "sokoban".into(),
            reward_functions: vec![],
            run_dir: scratch.join("run"),
            resume: false,
            device: device.clone(),
        })?;
        let setup_s = t.elapsed().as_secs_f64();
        // Phase starts, also written to a progress file so a run cut off by its time limit
        // still shows how far it got.
        let progress_path = out.join(format!("rust-iteration-{mode}.progress.json"));
        let start = Instant::now();
        let mut phases: Vec<Value> = Vec::new();
        let mem = MemoryMonitor::start(device);
        let mut on_event = |e: &TrainEvent<'_>| -> Result<(), ReportError> {
            if let TrainEvent::PhaseStarted { phase, units, .. } = e {
                phases.push(json!({
                    "phase": format!("{phase:?}").to_lowercase(),
                    "units": units,
                    "started_s": start.elapsed().as_secs_f64(),
                }));
                write_json_atomic(&progress_path, &json!({ "phases": phases }))?;
            }
            Ok(())
        };
        let metrics = trainer.iterate(&mut on_event)?;
        sync(device)?;
        let memory = mem.finish();
        let _ = std::fs::remove_file(&progress_path);
        let get = |k: &str| metrics.get(k).copied().unwrap_or(f64::NAN);
        Ok(json!({
            "mode": mode,
            "model_write_s": write_s,
            "setup_s": setup_s,
            "timing_s": {
                "sampling": get("timing_s/gen"),
                "scoring": get("timing_s/old_log_prob"),
                "advantages": get("timing_s/adv"),
                "critic": get("timing_s/update_critic"),
                "actor": get("timing_s/update_actor"),
                "iteration": get("timing_s/step"),
            },
            "rollouts": trainer_batch(&metrics),
            "phases": phases,
            "metrics": metrics,
            "memory": memory,
        }))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The sizes of the iteration's batch from its metrics.
fn trainer_batch(m: &ragen_gym_starpo::Metrics) -> Value {
    let get = |k: &str| m.get(k).copied();
    json!({
        "kept_trajectories": get("rollout/kept_trajectories"),
        "mean_response_tokens": get("train/response_length"),
        "max_response_tokens": get("response_length/max"),
    })
}
