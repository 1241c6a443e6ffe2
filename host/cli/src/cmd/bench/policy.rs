//! `ragen-gym bench policy`: sampling, prefill and training throughput of the candle policy, full
//! fine-tuning vs LoRA, with peak memory. It prints our figures alone: ratios against PyTorch,
//! Hugging Face `generate` and llama.cpp come only from `scripts/bench-anchors.sh`, which runs
//! the same shapes side by side on the same machine and reads `--json` (`docs/benchmarks.md`,
//! "Anchors for `bench policy`").

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy::{
    AdamW, AdamWConfig, AttentionMask, Device, KvCache, LlamaModel, LoadedModel, LoraConfig,
    Message, ParamGrads, Policy, SamplingParams, Tensor, TokenBatch, Tokenizer, Trainable,
    clip_grad_norm, sample, score,
};

use super::memory::MemoryProbe;
use super::stats::median;

/// Arguments of `bench policy`.
#[derive(clap::Args)]
pub struct PolicyArgs {
    /// A .gguf file or a Hugging Face directory (default: the installed SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Sampling batch sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub sample_batches: Vec<usize>,
    /// Skip the sampling and prefill measurements.
    #[arg(long)]
    pub no_sample: bool,
    /// Prefill: tokens of one prompt encoded at batch 1 into the KV cache (0 skips it).
    #[arg(long, default_value_t = 256)]
    pub prefill_tokens: usize,
    /// Prefill: timed repetitions; `tokens_per_s` uses their median (one prefill of 256 tokens
    /// is about half a second, within the noise of a shared machine).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill_reps: u32,
    /// New tokens per sampled sequence.
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// Training batch: sequences per step.
    #[arg(long, default_value_t = 4)]
    pub train_batch: usize,
    /// Training batch: tokens per sequence (all but the first are scored).
    #[arg(long, default_value_t = 256)]
    pub train_seq: usize,
    /// Optimiser steps measured per mode, after the warm-up steps.
    #[arg(long, default_value_t = 1)]
    pub train_steps: usize,
    /// Optimiser steps run before measuring (allocator and thread-pool warm-up).
    #[arg(long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// LoRA rank for the LoRA run (alpha = 2 x rank, all projections).
    #[arg(long, default_value_t = 8)]
    pub lora_rank: usize,
    /// Skip the training measurements.
    #[arg(long)]
    pub no_train: bool,
    /// Skip full fine-tuning (measure LoRA only).
    #[arg(long)]
    pub no_full: bool,
    /// Skip LoRA.
    #[arg(long)]
    pub no_lora: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: crate::shared::device::DeviceArgs,
    /// Train with activation (gradient) checkpointing: each layer is recomputed in the backward.
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// Measure a model of this Hugging Face `config.json`'s shape with random weights (e.g.
    /// `tests/fixtures/models/qwen2.5-0.5b-instruct/config.json`) instead of `--model`; the
    /// tokenizer comes from `--model` (only the sampling prompt uses it).
    #[arg(long)]
    pub random_weights: Option<PathBuf>,
}

/// Run the policy benchmark.
pub fn run(args: PolicyArgs) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let t0 = Instant::now();
    let path = args
        .model
        .clone()
        .unwrap_or_else(ragen_gym_policy::default_model_path);
    let mut loaded =
        ragen_gym_policy::load_on(&path, &device).context("failed to load the model")?;
    if let Some(path) = &args.random_weights {
        let config = ragen_gym_policy::ModelConfig::from_json_file(path)?;
        loaded.weights = ragen_gym_policy::random_weights(&config, 0, &device)?;
        loaded.config = config;
        loaded.source = path.clone();
    }
    let load_s = t0.elapsed().as_secs_f64();
    let mut report = serde_json::json!({
        "model": loaded.source,
        "threads": candle_threads(),
        "load_s": load_s,
        "sampling": [],
        "prefill": [],
        "training": [],
    });
    // The sampling prompt, also for `scripts/bench-anchors.sh` to give the anchors.
    let prompt = loaded.tokenizer.encode_chat(
        &[Message::user(
            "Write a short story about a robot who learns to paint.",
        )],
        true,
    )?;
    report["prompt_ids"] = serde_json::json!(prompt);
    if !args.no_sample {
        let model = loaded.frozen_model()?.for_sampling()?;
        bench_sampling(
            &model,
            &loaded.tokenizer,
            &prompt,
            &args,
            &device,
            &mut report,
        )?;
    }
    if !args.no_train {
        for (name, trainable) in training_modes(&args) {
            let row = bench_train(&loaded, name, trainable, &args, &device)?;
            report["training"].as_array_mut().unwrap().push(row);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Sampling at each `--sample-batches` size (temperature 1, so rows run to the token budget
/// most of the time), then prefill, into `report`.
fn bench_sampling(
    model: &LlamaModel,
    tok: &Tokenizer,
    prompt: &[u32],
    args: &PolicyArgs,
    device: &Device,
    report: &mut serde_json::Value,
) -> anyhow::Result<()> {
    for &b in &args.sample_batches {
        let probe = MemoryProbe::start(device);
        let prompts = vec![prompt.to_vec(); b];
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: args.new_tokens,
            seed: 1,
            ..Default::default()
        };
        let t = Instant::now();
        let out = sample(model, tok, &prompts, &params)?;
        let secs = t.elapsed().as_secs_f64();
        let generated: usize = out.iter().map(|s| s.tokens.len()).sum();
        report["sampling"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "batch": b,
                "prompt_tokens": prompt.len(),
                "generated_tokens": generated,
                "seconds": secs,
                "tokens_per_s": generated as f64 / secs,
                "peak_rss_mib": probe.finish().host_peak_rss_mib,
            }));
    }
    if args.prefill_tokens > 0 {
        let row = bench_prefill(model, args.prefill_tokens, args.prefill_reps as usize)?;
        report["prefill"].as_array_mut().unwrap().push(row);
    }
    Ok(())
}

/// Full fine-tuning and LoRA, unless `--no-full` / `--no-lora`.
fn training_modes(args: &PolicyArgs) -> Vec<(&'static str, Trainable)> {
    let mut modes = vec![];
    if !args.no_full {
        modes.push(("full", Trainable::Full));
    }
    if !args.no_lora {
        modes.push((
            "lora",
            Trainable::Lora(LoraConfig {
                rank: args.lora_rank,
                alpha: 2.0 * args.lora_rank as f64,
                ..LoraConfig::default()
            }),
        ));
    }
    modes
}

fn bench_train(
    loaded: &LoadedModel,
    name: &str,
    trainable: Trainable,
    args: &PolicyArgs,
    device: &Device,
) -> anyhow::Result<serde_json::Value> {
    let probe = MemoryProbe::start(device);
    let mut policy = Policy::new(loaded, trainable, 0)?;
    policy.set_gradient_checkpointing(args.gradient_checkpointing);
    let mut opt = AdamW::new(
        policy.params(),
        AdamWConfig {
            lr: 1e-6,
            ..Default::default()
        },
    )?;
    let vocab = loaded.config.vocab_size;
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = random_tokens(args.train_batch, args.train_seq, vocab)
        .into_iter()
        .map(|ids| {
            let mask = (0..ids.len()).map(|i| u8::from(i > 0)).collect();
            (ids, mask)
        })
        .collect();
    let batch = TokenBatch::right_padded(&seqs, 0)?;
    let (mut fwd, mut bwd, mut step) = (0.0, 0.0, 0.0);
    let mut steps_s = vec![];
    for i in 0..args.warmup_steps + args.train_steps {
        if i == args.warmup_steps {
            (fwd, bwd, step) = (0.0, 0.0, 0.0);
            steps_s.clear();
        }
        let t_step = Instant::now();
        let t = Instant::now();
        let s = score(policy.model(), &batch)?;
        let n = f64::from(s.mask.sum_all()?.to_scalar::<f32>()?);
        // Policy-gradient-shaped loss: -mean(logprob) - 0.001 mean(entropy).
        let loss = ((s.logprobs.sum_all()? + s.entropy.sum_all()?.affine(0.001, 0.0)?)?
            .affine(-1.0 / n, 0.0))?;
        fwd += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let store = loss.backward()?;
        let mut g = ParamGrads::from_store(store, policy.params());
        bwd += t.elapsed().as_secs_f64();
        let t = Instant::now();
        clip_grad_norm(&mut g, 1.0)?;
        opt.step(&g, 1e-6)?;
        step += t.elapsed().as_secs_f64();
        steps_s.push(t_step.elapsed().as_secs_f64());
    }
    let steps = args.train_steps.max(1) as f64;
    let total = (fwd + bwd + step) / steps;
    let tokens = (args.train_batch * args.train_seq) as f64;
    let tps = tokens / total;
    Ok(serde_json::json!({
        "mode": name,
        "batch": args.train_batch,
        "seq_len": args.train_seq,
        "steps": args.train_steps,
        "gradient_checkpointing": args.gradient_checkpointing,
        "warmup_steps": args.warmup_steps,
        "steps_s": steps_s,
        "trainable_params": policy.num_trainable(),
        "forward_s": fwd / steps,
        "backward_s": bwd / steps,
        "optimizer_s": step / steps,
        "step_s": total,
        "tokens_per_s": tps,
        "peak_rss_mib": probe.finish().host_peak_rss_mib,
    }))
}

/// `rows` rows of `len` token ids from a fixed xorshift64 stream (content does not matter for
/// speed; `scripts/bench_anchors.py` draws the same ids).
fn random_tokens(rows: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab as u64) as u32
    };
    (0..rows)
        .map(|_| (0..len).map(|_| next()).collect())
        .collect()
}

/// Encode one prompt of `tokens` random ids at batch 1 into a fresh KV cache and compute the
/// last position's logits (what a sampler's prefill does), after a short warm-up, `reps` times;
/// the rate is that of the median time (`scripts/bench_anchors.py` times its anchors the same
/// way).
fn bench_prefill(
    model: &LlamaModel,
    tokens: usize,
    reps: usize,
) -> anyhow::Result<serde_json::Value> {
    let ids = random_tokens(1, tokens, model.config().vocab_size).remove(0);
    let run = |ids: &[u32]| -> anyhow::Result<()> {
        let n = ids.len();
        let mut cache = KvCache::new(model.config().num_hidden_layers);
        let input = Tensor::from_slice(ids, (1, n), model.device())?;
        let mask = AttentionMask::new(&[vec![true; n]], n, model.config(), model.device())?;
        let hidden = model.forward_hidden(&input, &mask, Some(&mut cache))?;
        let logits = model.lm_logits(&hidden.narrow(1, n - 1, 1)?.squeeze(1)?)?;
        logits.to_vec2::<f32>()?;
        Ok(())
    };
    run(&ids[..8.min(tokens)])?;
    let mut all = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        run(&ids)?;
        all.push(t.elapsed().as_secs_f64());
    }
    let secs = median(all.clone());
    Ok(serde_json::json!({
        "tokens": tokens,
        "seconds": secs,
        "seconds_all": all,
        "tokens_per_s": tokens as f64 / secs,
    }))
}

/// The thread count candle's CPU kernels use (rayon's pool: `RAYON_NUM_THREADS` or all cores).
fn candle_threads() -> usize {
    ragen_gym_policy::cpu::num_threads()
}

fn print_table(r: &serde_json::Value) {
    println!(
        "model {} (loaded in {:.2} s, {} threads)",
        r["model"].as_str().unwrap_or("?"),
        r["load_s"].as_f64().unwrap_or(0.0),
        r["threads"]
    );
    println!("\nsampling (temperature 1, KV cache)");
    println!(
        "{:>6} {:>10} {:>9} {:>10} {:>10}",
        "batch", "tokens", "seconds", "tok/s", "peak MiB"
    );
    for s in r["sampling"].as_array().into_iter().flatten() {
        println!(
            "{:>6} {:>10} {:>9.2} {:>10.2} {:>10.0}",
            s["batch"].to_string(),
            s["generated_tokens"].to_string(),
            s["seconds"].as_f64().unwrap_or(0.0),
            s["tokens_per_s"].as_f64().unwrap_or(0.0),
            s["peak_rss_mib"].as_f64().unwrap_or(0.0),
        );
    }
    for p in r["prefill"].as_array().into_iter().flatten() {
        println!(
            "\nprefill: {} tokens at batch 1 in {:.2} s = {:.1} tok/s",
            p["tokens"],
            p["seconds"].as_f64().unwrap_or(0.0),
            p["tokens_per_s"].as_f64().unwrap_or(0.0),
        );
    }
    let train = r["training"].as_array().cloned().unwrap_or_default();
    if train.is_empty() {
        return;
    }
    println!("\ntraining step (forward + backward + AdamW), all tokens scored");
    println!(
        "{:>5} {:>8} {:>12} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9}",
        "mode", "BxT", "trainable", "fwd s", "bwd s", "opt s", "step s", "tok/s", "peak MiB"
    );
    for t in &train {
        println!(
            "{:>5} {:>8} {:>12} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>9.0}",
            t["mode"].as_str().unwrap_or("?"),
            format!("{}x{}", t["batch"], t["seq_len"]),
            t["trainable_params"].to_string(),
            t["forward_s"].as_f64().unwrap_or(0.0),
            t["backward_s"].as_f64().unwrap_or(0.0),
            t["optimizer_s"].as_f64().unwrap_or(0.0),
            t["step_s"].as_f64().unwrap_or(0.0),
            t["tokens_per_s"].as_f64().unwrap_or(0.0),
            t["peak_rss_mib"].as_f64().unwrap_or(0.0),
        );
    }
    if train.len() == 2 {
        let (a, b) = (&train[0], &train[1]);
        if let (Some(x), Some(y)) = (a["step_s"].as_f64(), b["step_s"].as_f64()) {
            println!(
                "{} / {} step time: {:.2}x",
                b["mode"].as_str().unwrap_or("?"),
                a["mode"].as_str().unwrap_or("?"),
                y / x
            );
        }
    }
}
