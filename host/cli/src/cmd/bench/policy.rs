//! `ragen-gym bench policy`: sampling and training throughput of the candle policy, full
//! fine-tuning vs LoRA, with peak memory, printed next to reference figures measured with other
//! stacks on the same kind of 2-core machine (`shared/models/README.md`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy::{
    AdamW, AdamWConfig, LoadedModel, LoraConfig, Message, ParamGrads, Policy, SamplingParams,
    TokenBatch, Trainable, clip_grad_norm, sample, score,
};

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
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub sample_batches: Vec<usize>,
    /// New tokens per sampled sequence.
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// Training batch: sequences per step.
    #[arg(long, default_value_t = 4)]
    pub train_batch: usize,
    /// Training batch: tokens per sequence (all but the first are scored).
    #[arg(long, default_value_t = 256)]
    pub train_seq: usize,
    /// Optimiser steps measured per mode (after none of warm-up; the first step is included).
    #[arg(long, default_value_t = 1)]
    pub train_steps: usize,
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
    pub device: crate::cmd::device_args::DeviceArgs,
}

/// Reference figures (tokens/s) from `shared/models/README.md`, same machine type, 2 threads.
const REF_HF_GENERATE_B1: f64 = 6.7;
const REF_HF_GENERATE_B16: f64 = 36.0;
const REF_LLAMA_CPP_F32_B1: f64 = 21.6;
const REF_PYTORCH_TRAIN: f64 = 45.0;

/// Peak resident set size of this process in MiB (`VmHWM`).
pub(crate) fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Reset the peak-RSS counter (Linux: writing 5 to clear_refs).
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Run the policy benchmark.
pub fn run(args: PolicyArgs) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let t0 = Instant::now();
    let path = args
        .model
        .clone()
        .unwrap_or_else(ragen_gym_policy::default_model_path);
    let loaded = ragen_gym_policy::load_on(&path, &device).context("failed to load the model")?;
    let load_s = t0.elapsed().as_secs_f64();
    let threads = candle_threads();
    let mut report = serde_json::json!({
        "model": loaded.source,
        "threads": threads,
        "load_s": load_s,
        "sampling": [],
        "training": [],
    });
    // Sampling: temperature 1 so rows run to the token budget most of the time.
    let model = loaded.frozen_model()?;
    let tok = &loaded.tokenizer;
    let prompt = tok.encode_chat(
        &[Message::user(
            "Write a short story about a robot who learns to paint.",
        )],
        true,
    )?;
    for &b in &args.sample_batches {
        reset_peak_rss();
        let prompts = vec![prompt.clone(); b];
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: args.new_tokens,
            seed: 1,
            ..Default::default()
        };
        let t = Instant::now();
        let out = sample(&model, tok, &prompts, &params)?;
        let secs = t.elapsed().as_secs_f64();
        let generated: usize = out.iter().map(|s| s.tokens.len()).sum();
        let reference = match b {
            1 => Some(REF_HF_GENERATE_B1),
            16 => Some(REF_HF_GENERATE_B16),
            _ => None,
        };
        let tps = generated as f64 / secs;
        report["sampling"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "batch": b,
                "prompt_tokens": prompt.len(),
                "generated_tokens": generated,
                "seconds": secs,
                "tokens_per_s": tps,
                "hf_generate_tokens_per_s": reference,
                "ratio_vs_hf_generate": reference.map(|r| tps / r),
                "ratio_vs_llama_cpp_f32_b1": (b == 1).then(|| tps / REF_LLAMA_CPP_F32_B1),
                "peak_rss_mib": peak_rss_mib(),
            }));
    }
    drop(model);
    if !args.no_train {
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
        for (name, trainable) in modes {
            let row = bench_train(&loaded, name, trainable, &args)?;
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

fn bench_train(
    loaded: &LoadedModel,
    name: &str,
    trainable: Trainable,
    args: &PolicyArgs,
) -> anyhow::Result<serde_json::Value> {
    reset_peak_rss();
    let policy = Policy::new(loaded, trainable, 0)?;
    let mut opt = AdamW::new(
        policy.params(),
        AdamWConfig {
            lr: 1e-6,
            ..Default::default()
        },
    )?;
    // Random token ids from a fixed xorshift64 stream (content does not matter for speed).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let vocab = loaded.config.vocab_size as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab) as u32
    };
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = (0..args.train_batch)
        .map(|_| {
            let ids: Vec<u32> = (0..args.train_seq).map(|_| next()).collect();
            let mask = (0..args.train_seq).map(|i| u8::from(i > 0)).collect();
            (ids, mask)
        })
        .collect();
    let batch = TokenBatch::right_padded(&seqs, 0)?;
    let (mut fwd, mut bwd, mut step) = (0.0, 0.0, 0.0);
    for _ in 0..args.train_steps {
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
        "trainable_params": policy.num_trainable(),
        "forward_s": fwd / steps,
        "backward_s": bwd / steps,
        "optimizer_s": step / steps,
        "step_s": total,
        "tokens_per_s": tps,
        "pytorch_tokens_per_s": REF_PYTORCH_TRAIN,
        "ratio_vs_pytorch": tps / REF_PYTORCH_TRAIN,
        "peak_rss_mib": peak_rss_mib(),
    }))
}

fn candle_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
        "{:>6} {:>10} {:>9} {:>10} {:>14} {:>10}",
        "batch", "tokens", "seconds", "tok/s", "vs HF generate", "peak MiB"
    );
    for s in r["sampling"].as_array().into_iter().flatten() {
        println!(
            "{:>6} {:>10} {:>9.2} {:>10.2} {:>14} {:>10.0}",
            s["batch"].to_string(),
            s["generated_tokens"].to_string(),
            s["seconds"].as_f64().unwrap_or(0.0),
            s["tokens_per_s"].as_f64().unwrap_or(0.0),
            s["ratio_vs_hf_generate"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}x")),
            s["peak_rss_mib"].as_f64().unwrap_or(0.0),
        );
    }
    let train = r["training"].as_array().cloned().unwrap_or_default();
    if train.is_empty() {
        return;
    }
    println!("\ntraining step (forward + backward + AdamW), all tokens scored");
    println!(
        "{:>5} {:>8} {:>12} {:>7} {:>7} {:>7} {:>8} {:>8} {:>11} {:>9}",
        "mode",
        "BxT",
        "trainable",
        "fwd s",
        "bwd s",
        "opt s",
        "step s",
        "tok/s",
        "vs PyTorch",
        "peak MiB"
    );
    for t in &train {
        println!(
            "{:>5} {:>8} {:>12} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>10.2}x {:>9.0}",
            t["mode"].as_str().unwrap_or("?"),
            format!("{}x{}", t["batch"], t["seq_len"]),
            t["trainable_params"].to_string(),
            t["forward_s"].as_f64().unwrap_or(0.0),
            t["backward_s"].as_f64().unwrap_or(0.0),
            t["optimizer_s"].as_f64().unwrap_or(0.0),
            t["step_s"].as_f64().unwrap_or(0.0),
            t["tokens_per_s"].as_f64().unwrap_or(0.0),
            t["ratio_vs_pytorch"].as_f64().unwrap_or(0.0),
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
