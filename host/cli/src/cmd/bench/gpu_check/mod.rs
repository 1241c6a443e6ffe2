//! `ragen-gym bench gpu-check --out DIR`: the one-run GPU check (`docs/gpu.md`) on a model of
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
//! CPU. scripts/gpu-check.sh runs each part as its own process under a time limit. The parts
//! live in `workload.rs`, `correctness.rs` and `throughput.rs`.

mod correctness;
mod throughput;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy as pol;
use serde_json::Value;

use crate::shared::device::DeviceArgs;
use workload::Workload;

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
            Part::Workload => workload::workload_json(&w, &device)?,
            Part::Correctness => correctness::correctness(&w, &device, &args.out)?,
            Part::Sampling => throughput::sampling(&w, &device)?,
            Part::TrainStep => throughput::train_step(&w, &device)?,
            Part::IterationFull => throughput::iteration(&w, &device, false, &args.out)?,
            Part::IterationLora => throughput::iteration(&w, &device, true, &args.out)?,
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

/// Write `v` to `path` through a temporary file and a rename.
fn write_json_atomic(path: &Path, v: &Value) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(v)?)
        .with_context(|| format!("failed to write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(())
}
