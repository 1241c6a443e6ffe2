//! The one driver of "one trainer iteration" for the benchmarks (`bench iteration`,
//! `bench gpu-check`'s iteration parts): a fresh [`Trainer`] on the given config and env
//! plugin, one `iterate` (rollout, scoring, advantages, critic and actor updates; no
//! validation, no checkpoint) under a [`MemoryProbe`], and the trainer's own phase timings.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy::{Device, FlopCount};
use ragen_gym_starpo::{Config, Metrics, Reporter, TrainSetup, Trainer};
use serde_json::{Value, json};

use super::memory::{MemoryPeak, MemoryProbe};
use crate::shared::run::RunEnvs;

/// What one iteration took and produced.
pub struct IterationReport {
    /// Seconds to set the trainer up (models, env pools).
    pub setup_s: f64,
    /// Seconds of the iteration itself.
    pub seconds: f64,
    /// Peak memory during the iteration.
    pub memory: MemoryPeak,
    /// The iteration's metrics.
    pub metrics: Metrics,
    /// Model FLOPs of the iteration's forwards, counted from their shapes.
    pub flops: FlopCount,
    /// The policy's hidden and MLP widths (the shapes of the update's largest products).
    pub widths: (usize, usize),
}

impl IterationReport {
    /// Metric `key`, or NaN when the iteration did not report it.
    pub fn get(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }

    /// Seconds in rollout sampling (`timing_s/gen`).
    pub fn sampling_s(&self) -> f64 {
        self.get("timing_s/gen")
    }

    /// Seconds scoring old log-probs, reference log-probs and values (`timing_s/old_log_prob`).
    pub fn scoring_s(&self) -> f64 {
        self.get("timing_s/old_log_prob")
    }

    /// Seconds in the critic update (`timing_s/update_critic`).
    pub fn critic_s(&self) -> f64 {
        self.get("timing_s/update_critic")
    }

    /// Seconds in the actor update (`timing_s/update_actor`).
    pub fn actor_s(&self) -> f64 {
        self.get("timing_s/update_actor")
    }

    /// The sizes of the iteration's batch: `kept_trajectories`, `mean_response_tokens`,
    /// `max_response_tokens`.
    pub fn batch_json(&self) -> Value {
        let get = |k: &str| self.metrics.get(k).copied();
        json!({
            "kept_trajectories": get("rollout/kept_trajectories"),
            "mean_response_tokens": get("train/response_length"),
            "max_response_tokens": get("response_length/max"),
        })
    }
}

/// Run one iteration of a fresh trainer on `config` with the envs of `envs`, writing the run
/// into `run_dir` (the caller removes it) and sending the events to `reporter`.
///
/// # Errors
/// The trainer cannot be set up in `run_dir`, or the iteration fails.
pub fn one_iteration(
    config: Config,
    envs: &RunEnvs,
    device: &Device,
    run_dir: &Path,
    reporter: &mut dyn Reporter,
) -> anyhow::Result<IterationReport> {
    let t = Instant::now();
    let mut trainer = Trainer::new(TrainSetup {
        make_env: envs.factory(&config),
        plugin_sha256: envs.sha256(),
        config,
        env_source: envs.lock.reference.clone(),
        reward_functions: vec![],
        run_dir: run_dir.to_path_buf(),
        resume: false,
        device: device.clone(),
    })
    .with_context(|| format!("failed to set up the trainer in {}", run_dir.display()))?;
    let setup_s = t.elapsed().as_secs_f64();
    let probe = MemoryProbe::start(device);
    let before = FlopCount::now();
    let t = Instant::now();
    let metrics = trainer.iterate(reporter)?;
    device.synchronize()?;
    let seconds = t.elapsed().as_secs_f64();
    let flops = FlopCount::now().since(before);
    Ok(IterationReport {
        setup_s,
        seconds,
        memory: probe.finish(),
        metrics,
        flops,
        widths: (
            trainer.model_config().hidden_size,
            trainer.model_config().intermediate_size,
        ),
    })
}

/// The speed of a large f32 matrix product through candle's matmul (the kernels the model's
/// projections use), in GFLOP/s: the best of `reps` products of two 1024 × 1024 matrices after
/// one warm-up, `2·n³` FLOPs each.
///
/// # Errors
/// Allocation or matmul failure on `device`.
pub fn gemm_peak_gflops(device: &Device, reps: usize) -> anyhow::Result<f64> {
    gemm_gflops(device, [1024, 1024, 1024], reps)
}

/// The speed of `[m, k] × [k, n]` f32 products through candle's matmul in GFLOP/s: the best of
/// `reps` after one warm-up, `2·m·k·n` FLOPs each.
///
/// # Errors
/// Allocation or matmul failure on `device`.
pub fn gemm_gflops(device: &Device, [m, k, n]: [usize; 3], reps: usize) -> anyhow::Result<f64> {
    let a = ragen_gym_policy::Tensor::randn(0f32, 1.0, (m, k), device)?;
    let b = ragen_gym_policy::Tensor::randn(0f32, 1.0, (k, n), device)?;
    a.matmul(&b)?;
    device.synchronize()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        a.matmul(&b)?;
        device.synchronize()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(2.0 * (m * k * n) as f64 / best / 1e9)
}
