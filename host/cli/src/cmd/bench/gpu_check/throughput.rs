//! The GPU check's throughput parts: batched sampling, one optimiser step (full fine-tuning and
//! LoRA), and one RAGEN-shaped StarPO-S iteration on Sokoban through the real trainer
//! ([`one_iteration`]), each with its peak memory.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy::{
    self as pol, AdamW, AdamWConfig, Device, ParamGrads, Policy, SamplingParams, TokenBatch,
    Trainable,
};
use ragen_gym_starpo::{Config, ConfigBuilder, Profile, ReportError, TrainEvent};
use serde_json::{Value, json};

use super::workload::{Workload, random_ids};
use super::write_json_atomic;
use crate::cmd::bench::harness::one_iteration;
use crate::cmd::bench::memory::MemoryProbe;
use crate::shared::config::env_preset;
use crate::shared::run::RunEnvs;
use crate::shared::sandbox::SandboxArgs;

/// The sampling part: one batched sampling run after an untimed warm-up.
pub(super) fn sampling(w: &Workload, device: &Device) -> anyhow::Result<Value> {
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
    device.synchronize()?;
    let mem = MemoryProbe::start(device);
    let t = Instant::now();
    let out = pol::sample(
        &model,
        &loaded.tokenizer,
        &prompts,
        &params(w.sample_new_tokens),
    )?;
    device.synchronize()?;
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
        "memory": mem.finish().json(),
    }))
}

/// The train-step part: one AdamW step over micro-batches of one sequence, after a warm-up
/// step, in full fine-tuning and LoRA.
pub(super) fn train_step(w: &Workload, device: &Device) -> anyhow::Result<Value> {
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
        let mem = MemoryProbe::start(device);
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
                device.synchronize()?;
                fwd += t.elapsed().as_secs_f64();
                let t = Instant::now();
                let store = loss.backward()?;
                match &mut grads {
                    None => grads = Some(ParamGrads::from_store(store, policy.params())),
                    Some(g) => g.accumulate(store, policy.params())?,
                }
                device.synchronize()?;
                bwd += t.elapsed().as_secs_f64();
            }
            let t = Instant::now();
            let mut g = grads.context("no micro-batches")?;
            pol::clip_grad_norm(&mut g, 1.0)?;
            opt.step(&g, 1e-6)?;
            device.synchronize()?;
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
            "memory": mem.finish().json(),
        }));
    }
    Ok(json!({ "modes": modes }))
}

/// The iteration's config: the Sokoban preset on RAGEN's defaults, the workload's overrides,
/// free sampling, the random model in `model_dir`, one step, LoRA or full fine-tuning.
fn iteration_config(w: &Workload, lora: bool, model_dir: &Path) -> anyhow::Result<Config> {
    let mut b = ConfigBuilder::new();
    if let Some(preset) = env_preset("sokoban") {
        b = b.layer_preset(preset, Profile::Full)?;
    }
    let mut overrides = w.iteration.clone();
    // RAGEN samples freely; the Sokoban preset's constrained decoding
    // (`docs/ragen-semantics.md`, "Constrained action decoding") is a CPU-profile aid, and the
    // synthetic tokenizer's byte vocabulary is not what it is built for.
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
    Ok(b.build()?)
}

/// The iteration parts: one RAGEN-shaped iteration with full fine-tuning or LoRA, with the
/// trainer's time breakdown. The phase starts also go to `OUT/rust-iteration-<mode>.progress.json`
/// while it runs, so a run cut off by its time limit still shows how far it got.
pub(super) fn iteration(
    w: &Workload,
    device: &Device,
    lora: bool,
    out: &Path,
) -> anyhow::Result<Value> {
    let mode = if lora { "lora" } else { "full" };
    let scratch =
        std::env::temp_dir().join(format!("ragen-gym-gpu-check-{}-{mode}", std::process::id()));
    let progress = out.join(format!("rust-iteration-{mode}.progress.json"));
    let result = run_iteration(w, device, lora, &scratch, &progress);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// One iteration on the workload's model saved into `scratch/model`, its phases written to
/// `progress`.
fn run_iteration(
    w: &Workload,
    device: &Device,
    lora: bool,
    scratch: &Path,
    progress: &Path,
) -> anyhow::Result<Value> {
    let model_dir = scratch.join("model");
    std::fs::create_dir_all(&model_dir)
        .with_context(|| format!("failed to create {}", model_dir.display()))?;
    let t = Instant::now();
    w.loaded(&Device::Cpu)?.save_pretrained(&model_dir)?;
    let write_s = t.elapsed().as_secs_f64();
    let config = iteration_config(w, lora, &model_dir)?;
    let envs = RunEnvs::load(&SandboxArgs::default(), &config, "sokoban", 0)?;
    // Phase starts, in seconds from the first one (the iteration's start).
    let mut start: Option<Instant> = None;
    let mut phases: Vec<Value> = Vec::new();
    // Units done inside the phase under way (a rollout counts each turn's prompts anew), when
    // each progress report came: where a run cut off by its limit spent its time.
    let mut done: Vec<Value> = Vec::new();
    let mut on_event = |e: &TrainEvent<'_>| -> Result<(), ReportError> {
        match e {
            TrainEvent::PhaseStarted { phase, units, .. } => {
                let start = *start.get_or_insert_with(Instant::now);
                phases.push(json!({
                    "phase": format!("{phase:?}").to_lowercase(),
                    "units": units,
                    "started_s": start.elapsed().as_secs_f64(),
                }));
                done.clear();
            }
            TrainEvent::Progress { done: units, .. } => {
                let at = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
                done.push(json!({ "done": units, "at_s": at }));
            }
            _ => return Ok(()),
        }
        write_json_atomic(progress, &json!({ "phases": phases, "progress": done }))?;
        Ok(())
    };
    let it = one_iteration(config, &envs, device, &scratch.join("run"), &mut on_event)?;
    let _ = std::fs::remove_file(progress);
    Ok(json!({
        "mode": if lora { "lora" } else { "full" },
        "model_write_s": write_s,
        "setup_s": it.setup_s,
        "timing_s": {
            "sampling": it.sampling_s(),
            "scoring": it.scoring_s(),
            "advantages": it.get("timing_s/adv"),
            "critic": it.critic_s(),
            "actor": it.actor_s(),
            "iteration": it.get("timing_s/step"),
        },
        "rollouts": it.batch_json(),
        "phases": phases,
        "metrics": it.metrics,
        "memory": it.memory.json(),
    }))
}
