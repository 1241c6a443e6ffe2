//! `ragen-gym sft --env PLUGIN [--episodes N] [--demonstrations FILE] [--model M] [--run-dir DIR]
//! [--epochs E] [--lr LR] [--lr-schedule S] [--warmup-ratio R] [--batch-size B] [--val-every N]`:
//! supervised fine-tuning on the env expert's demonstrations (`ragen_gym_starpo::sft`), the warm
//! start of RAGEN v1's appendix C.
//!
//! The config is `train`'s (the same layers, so the same prompt, chat template, turn layout and
//! answer format). The run directory holds `demonstrations.jsonl` (one
//! `trajectories.jsonl`-shaped record per demonstration, readable by `--demonstrations` and
//! `replay`), `sft_metrics.jsonl` (per epoch: `sft/loss`, `sft/expert_logp`, `val-env/*`),
//! `sft_trajectories.jsonl` (validation samples), `config.toml`, `run.json`,
//! `ragen-gym.lock` and the checkpoint; `ragen-gym train --resume DIR` continues it with RL, and
//! `ragen-gym sft --resume DIR --epochs N` with more epochs of SFT (or after a crash): the run's
//! own config, demonstrations, learning rate, schedule and batch size, from its last completed
//! epoch.

use crate::ExpectedError;
use crate::cmd::train::{
    default_run_dir, references, remove_unused_run_dir, resumed_base, user_config,
};
use crate::report::Reporters;
use crate::report::jsonl::{EnvSource, JsonlReporter};
use crate::report::progress::ProgressReporter;
use crate::report::summary::{SummaryReporter, val_metric};
use crate::shared::config::base_config;
use crate::shared::device::DeviceArgs;
use crate::shared::plugins::write_lock;
use crate::shared::run::RunEnvs;
use crate::shared::sandbox::SandboxArgs;
use anyhow::Context as _;
use ragen_gym_starpo::config::WarmupStyle;
use ragen_gym_starpo::run_dir::read_trajectory_records;
use ragen_gym_starpo::{Config, SftSchedule};
use ragen_gym_starpo::{Demonstrations, Metrics, RunDir, SftSetup, SftTrainer, Split, TrainError};
use std::path::PathBuf;

/// Arguments of `ragen-gym sft`.
#[derive(clap::Args)]
pub struct Args {
    /// The env plugin (its expert makes the demonstrations). Optional with `--resume`.
    #[arg(
        long = "env",
        value_name = "PLUGIN",
        required_unless_present = "resume"
    )]
    pub env: Option<String>,
    /// Continue the SFT run in DIR from its last completed epoch up to `--epochs` in all (its
    /// own config, demonstrations, learning rate, schedule and batch size).
    #[arg(long, value_name = "DIR", conflicts_with_all = [
        "demonstrations", "model", "config", "set", "run_dir", "lr", "lr_schedule", "warmup_ratio",
        "batch_size", "no_cpu_profile"
    ])]
    pub resume: Option<PathBuf>,
    /// Expert episodes to collect (seeds `seed.train + i`).
    #[arg(long, default_value_t = 256, conflicts_with = "demonstrations")]
    pub episodes: usize,
    /// Learn from these trajectories instead (a `trajectories.jsonl` or `demonstrations.jsonl`).
    #[arg(long, value_name = "FILE")]
    pub demonstrations: Option<PathBuf>,
    /// The model: `default`, a `.gguf` file or a Hugging Face directory.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// An experiment config file, as for `train`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one config key, `section.key=value` (repeatable), as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Where to write the run (default `runs/<env>-sft-<unix time>`).
    #[arg(long = "run-dir", value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Passes over the demonstrations, in all (with `--resume`, those done included); a cosine
    /// `--lr-schedule` reaches 0 at the last step of the last of them.
    #[arg(long, default_value_t = 2)]
    pub epochs: u32,
    /// Learning rate (default: the config's `actor.actor_lr`); the peak rate of a schedule.
    #[arg(long)]
    pub lr: Option<f64>,
    /// How the learning rate moves over the optimiser steps of all the epochs: `constant`, or
    /// `cosine` (half a cosine down to 0 at the last step), after the warm-up.
    #[arg(long = "lr-schedule", value_enum, default_value = "constant")]
    pub lr_schedule: LrSchedule,
    /// The share of the optimiser steps over which the rate rises linearly from 0, in [0, 1].
    #[arg(long = "warmup-ratio", default_value_t = 0.0, value_name = "R", value_parser = ratio)]
    pub warmup_ratio: f64,
    /// Validate (and score the expert's tokens) after every N-th epoch and after the last,
    /// instead of after each: both cost about half an epoch on Sokoban.
    #[arg(long = "val-every", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub val_every: u32,
    /// Demonstrations per optimiser step.
    #[arg(long = "batch-size", default_value_t = 8)]
    pub batch_size: usize,
    /// Do not apply the CPU profile even when running on the CPU.
    #[arg(long)]
    pub no_cpu_profile: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Sandbox limits and capability grants.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// `--lr-schedule`: what the rate does after the warm-up (verl's `optim.warmup_style` names).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LrSchedule {
    /// The peak rate until the last step.
    Constant,
    /// Half a cosine from the peak down to 0 at the last step.
    Cosine,
}

impl From<LrSchedule> for WarmupStyle {
    fn from(s: LrSchedule) -> Self {
        match s {
            LrSchedule::Constant => WarmupStyle::Constant,
            LrSchedule::Cosine => WarmupStyle::Cosine,
        }
    }
}

/// A share in [0, 1] (`--warmup-ratio`).
fn ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is not in [0, 1]"))
    }
}

/// Read the demonstrations of `--demonstrations FILE`.
fn read_demonstrations(path: &std::path::Path) -> anyhow::Result<Demonstrations> {
    let records = read_trajectory_records(path, None)?;
    anyhow::ensure!(
        !records.is_empty(),
        "{} holds no trajectory",
        path.display()
    );
    Ok(Demonstrations::Given(
        records.into_iter().map(|(_, r)| r.trajectory).collect(),
    ))
}

/// The run's config, env plugin, run directory and demonstrations: a new run's from the
/// arguments, or with `--resume DIR` the run's own (`config.toml`, `run.json`,
/// `demonstrations.jsonl`).
fn run_base(
    args: &Args,
    device: &ragen_gym_policy::Device,
) -> anyhow::Result<(Config, String, PathBuf, Demonstrations)> {
    if let Some(dir) = &args.resume {
        let (builder, env) = resumed_base(dir, args.env.as_deref())?;
        let config = user_config(builder, None, &[], None, None).map_err(ExpectedError::config)?;
        let demos = read_demonstrations(&dir.join("demonstrations.jsonl"))?;
        return Ok((config, env, dir.clone(), demos));
    }
    let env = args
        .env
        .clone()
        .context("--env PLUGIN is required (or --resume DIR)")?;
    let builder = base_config(&env, device, args.no_cpu_profile).map_err(ExpectedError::config)?;
    let config = user_config(
        builder,
        args.config.as_deref(),
        &args.set,
        args.model.as_deref(),
        None,
    )
    .map_err(ExpectedError::config)?;
    let demonstrations = match &args.demonstrations {
        Some(path) => read_demonstrations(path)?,
        None => Demonstrations::Collect(args.episodes),
    };
    let run_dir = args
        .run_dir
        .clone()
        .unwrap_or_else(|| default_run_dir(&format!("{env}-sft")));
    Ok((config, env, run_dir, demonstrations))
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let (config, env, run_dir, demonstrations) = run_base(&args, &device)?;
    let envs = RunEnvs::load(&args.sandbox, &config, &env, 0)?;
    let env_source = EnvSource {
        plugin: envs.lock.reference.clone(),
        plugin_sha256: envs.sha256(),
        env_config: config.env.config.clone(),
    };
    let summary = SummaryReporter::new(config.val_batch_size(), references(&envs, &config)?);
    let created = (!run_dir.exists()).then(|| run_dir.clone());
    let mut sft = SftTrainer::new(SftSetup {
        make_env: envs.factory(&config),
        plugin_sha256: envs.sha256(),
        lr: args.lr.unwrap_or(config.actor.actor_lr),
        config,
        env_source: env,
        run_dir,
        device,
        demonstrations,
        epochs: args.epochs,
        schedule: SftSchedule {
            style: args.lr_schedule.into(),
            warmup_ratio: args.warmup_ratio,
        },
        val_every: args.val_every,
        batch_size: args.batch_size,
        resume: args.resume.is_some(),
    })
    .inspect_err(|_| remove_unused_run_dir(created.as_deref()))
    .map_err(|e| match e {
        e @ (TrainError::Config(_) | TrainError::Constraint(_) | TrainError::Resume(_)) => {
            ExpectedError::config(e)
        }
        e => ExpectedError::training("sft setup", e),
    })?;
    eprintln!("run directory: {}", sft.run_dir().display());
    write_lock(sft.run_dir(), vec![envs.lock])?;
    let run = RunDir::open(sft.run_dir())?;
    let files = (
        run.sft_metrics_path(),
        run.root().join("sft_trajectories.jsonl"),
    );
    let jsonl = JsonlReporter::with_files(RunDir::open(run.root())?, env_source, 64, files);
    if args.resume.is_none() {
        write_demonstrations(&run, &jsonl, sft.demonstrations())?;
    }
    let mut reporters = Reporters(vec![
        Box::new(ProgressReporter::new()),
        Box::new(jsonl),
        Box::new(summary),
    ]);
    sft.train(&mut reporters)
        .map_err(|e| ExpectedError::training("sft", e))?;
    // Every epoch of the run, those of earlier processes included (`--resume`).
    let epochs: Vec<Metrics> = ragen_gym_starpo::run_dir::read_jsonl(&run.sft_metrics_path())?
        .iter()
        .map(numbers)
        .collect();
    print_summary(&epochs);
    eprintln!(
        "continue with RL: ragen-gym train --resume {}",
        run.root().display()
    );
    Ok(())
}

/// `demonstrations.jsonl`: one record per demonstration (iteration 0, split `train`).
fn write_demonstrations(
    run: &RunDir,
    jsonl: &JsonlReporter,
    demos: &[ragen_gym_core::Trajectory],
) -> anyhow::Result<()> {
    let mut w = run.jsonl_writer(&run.root().join("demonstrations.jsonl"))?;
    for t in demos {
        w.write(&jsonl.record(0, Split::Train, t, None))?;
    }
    w.sync()?;
    Ok(())
}

/// The numeric fields of a metrics line.
fn numbers(line: &serde_json::Value) -> Metrics {
    line.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
        .collect()
}

/// One line per epoch: loss, the expert's mean token log-prob, validation success and the
/// validation's agreement with the expert (`val-env/<tag>/expert_agreement`).
fn print_summary(epochs: &[Metrics]) {
    println!("epoch  loss     expert_logp  val_success  val_expert_agreement");
    for m in epochs {
        let get = |k: &str| m.get(k).map_or("-".to_string(), |v| format!("{v:.4}"));
        let val = |suffix: &str| {
            val_metric(m, suffix).map_or("-".to_string(), |(_, v)| format!("{v:.4}"))
        };
        let epoch = m.get("sft/epoch").copied().unwrap_or(0.0);
        println!(
            "{epoch:<6} {:<8} {:<12} {:<12} {}",
            get("sft/loss"),
            get("sft/expert_logp"),
            val("/success"),
            val("/expert_agreement")
        );
    }
}
