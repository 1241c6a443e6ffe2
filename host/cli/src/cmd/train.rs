//! `ragen-gym train --env PLUGIN [--model M] [--config FILE] [--set k=v]... [--iterations N]
//! [--run-dir DIR] [--resume DIR] [--allow-host H:P]`: StarPO / StarPO-S training.
//!
//! Config layers, lowest first: the embedded default, the CPU profile (`configs/cpu.toml`, unless
//! built with CUDA or `--no-cpu-profile`), the env preset (`configs/<env>.toml` for a built-in),
//! `--config FILE`, `RAGEN_<SECTION>__<KEY>` variables, `--set`, then `--model` / `--iterations`.
//! With `--resume DIR` the run's own `config.toml` replaces the first four layers.

use super::plugin_args::{SandboxArgs, load, load_reward_functions};
use crate::ExpectedError;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ragen_gym_core::{Env, EnvCallError};
use ragen_gym_starpo::config::{CPU_PROFILE_TOML, env_preset};
use ragen_gym_starpo::{ConfigBuilder, Phase, TrainEvent, TrainSetup, Trainer};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Arguments of `ragen-gym train`.
#[derive(clap::Args)]
pub struct Args {
    /// The env plugin: a built-in name (`bandit`, `sokoban`, `frozenlake`) or a `.wasm` file.
    /// Optional with `--resume` (the run remembers it).
    #[arg(long = "env", value_name = "PLUGIN")]
    pub env: Option<String>,
    /// The model: `default` (SmolLM2-135M-Instruct), a `.gguf` file or a Hugging Face directory.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// An experiment config file (e.g. `configs/starpo-s.toml`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one key, `section.key=value` (repeatable), e.g. `--set actor.clip_ratio_high=0.2`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Number of training iterations (`trainer.total_training_steps`).
    #[arg(long, value_name = "N")]
    pub iterations: Option<u32>,
    /// Where to write the run (default `runs/<env>-<unix time>`).
    #[arg(long = "run-dir", value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Continue the run in DIR from its last checkpoint.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["run_dir", "config"])]
    pub resume: Option<PathBuf>,
    /// Do not apply the CPU profile even without a GPU.
    #[arg(long)]
    pub no_cpu_profile: bool,
    /// A reward-function plugin (`.wasm`) whose score is added to every trajectory's env
    /// rewards (repeatable; not remembered by `--resume`, pass it again).
    #[arg(long = "reward-plugin", value_name = "PLUGIN")]
    pub reward_plugin: Vec<String>,
    /// Sandbox limits and capability grants.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

fn env_name(spec: &str) -> String {
    Path::new(spec)
        .file_stem()
        .map_or_else(|| spec.to_string(), |s| s.to_string_lossy().into_owned())
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (builder, env_spec, run_dir) = match &args.resume {
        Some(dir) => {
            let info: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).with_context(
                    || format!("failed to read {}", dir.join("run.json").display()),
                )?)
                .with_context(|| format!("failed to parse {}", dir.join("run.json").display()))?;
            let env = match &args.env {
                Some(e) => e.clone(),
                None => info["env_source"]
                    .as_str()
                    .context("run.json has no env_source; pass --env")?
                    .to_string(),
            };
            (
                Trainer::resume_config(dir).map_err(ExpectedError::config)?,
                env,
                dir.clone(),
            )
        }
        None => {
            let env = args
                .env
                .clone()
                .context("--env PLUGIN is required (or --resume DIR)")?;
            let mut b = ConfigBuilder::new();
            if !cfg!(feature = "cuda") && !args.no_cpu_profile {
                b = b
                    .layer_str(CPU_PROFILE_TOML, "the CPU profile (configs/cpu.toml)")
                    .map_err(ExpectedError::config)?;
            }
            if let Some(preset) = env_preset(&env) {
                b = b
                    .layer_str(preset, &format!("the {env} preset"))
                    .map_err(ExpectedError::config)?;
            }
            if let Some(f) = &args.config {
                b = b.layer_file(f).map_err(ExpectedError::config)?;
            }
            let dir = args.run_dir.clone().unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                PathBuf::from("runs").join(format!("{}-{t}", env_name(&env)))
            });
            (b, env, dir)
        }
    };
    let config = finish_config(builder, &args).map_err(ExpectedError::config)?;

    // One live instance per env: the train pool, the validation pool, and some slack for
    // instances being replaced after a trap.
    let live = config.train_batch_size()
        + config.es_manager.val.env_groups * config.es_manager.val.group_size;
    let mut sandbox_args = args.sandbox.clone();
    sandbox_args.max_instances = Some(u32::try_from(live + 16).unwrap_or(u32::MAX));
    let plugin = load(&env_spec, &sandbox_args)?;
    let grants = args.sandbox.grants()?;
    let env_config = config.env.config.clone();
    let sha = plugin.info().sha256.clone();
    let make_env: ragen_gym_starpo::EnvFactory =
        Box::new(move || -> Result<Box<dyn Env>, EnvCallError> {
            Ok(Box::new(plugin.new_env(&env_config, grants.clone())?))
        });
    let mut trainer = Trainer::new(TrainSetup {
        config,
        make_env,
        plugin_sha256: sha,
        env_source: env_spec,
        reward_functions: load_reward_functions(&args.reward_plugin, &args.sandbox)?,
        run_dir,
        resume: args.resume.is_some(),
    })
    .map_err(|e| ExpectedError::training("training setup", e))?;
    eprintln!("run directory: {}", trainer.run_dir().display());
    let mut reporter = Reporter::new();
    trainer
        .train(&mut |e| reporter.on_event(e))
        .map_err(|e| ExpectedError::training("training", e))?;
    Ok(())
}

/// The layers above the files: environment variables, `--set`, `--model`, `--iterations`.
fn finish_config(
    mut builder: ConfigBuilder,
    args: &Args,
) -> Result<ragen_gym_starpo::Config, ragen_gym_starpo::ConfigError> {
    builder = builder.layer_env(std::env::vars())?;
    for s in &args.set {
        builder = builder.layer_override(s)?;
    }
    if let Some(m) = &args.model {
        builder = builder.layer_override(&format!("model.path={}", toml_quote(m)))?;
    }
    if let Some(n) = args.iterations {
        builder = builder.layer_override(&format!("trainer.total_training_steps={n}"))?;
    }
    builder.build()
}

fn toml_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Renders [`TrainEvent`]s: a progress bar on stderr (hidden off a TTY) and one summary line
/// per iteration.
struct Reporter {
    bar: Option<ProgressBar>,
    total: u32,
}

impl Reporter {
    fn new() -> Self {
        Self {
            bar: None,
            total: 0,
        }
    }

    fn on_event(&mut self, e: TrainEvent) {
        match e {
            TrainEvent::Started {
                start_iteration,
                total,
                trainable_params,
                batch,
            } => {
                self.total = total;
                eprintln!(
                    "training iterations {start_iteration}..={total}: {batch} trajectories per rollout, \
                     {trainable_params} trainable parameters"
                );
            }
            TrainEvent::PhaseStarted {
                iteration,
                phase,
                units,
            } => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
                if !std::io::stderr().is_terminal() {
                    eprintln!(
                        "iteration {iteration}/{}: {} ({units} units)",
                        self.total,
                        phase.name()
                    );
                }
                let bar =
                    ProgressBar::with_draw_target(Some(units as u64), ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>14} [{bar:30}] {pos}/{len} {elapsed_precise}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(format!("{iteration}/{} {}", self.total, phase.name()));
                self.bar = Some(bar);
            }
            TrainEvent::Progress { done, phase, .. } => {
                if let Some(b) = &self.bar {
                    // Sampling progress restarts every turn; the bar shows the current turn.
                    let _: Phase = phase;
                    b.set_position(done as u64);
                }
            }
            TrainEvent::Metrics { iteration, metrics } => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
                let pick = |suffix: &str| {
                    metrics
                        .iter()
                        .find(|(k, _)| k.ends_with(suffix))
                        .map(|(k, v)| format!("{k}={v:.4}"))
                };
                let parts: Vec<String> = [
                    "/success",
                    "rollout/in_group_std",
                    "actor/entropy_loss",
                    "actor/grad_norm",
                    "train/response_length",
                    "timing_s/step",
                ]
                .iter()
                .filter_map(|s| {
                    if *s == "/success" {
                        let v: Vec<String> = metrics
                            .iter()
                            .filter(|(k, _)| k.ends_with("/success"))
                            .map(|(k, v)| format!("{k}={v:.3}"))
                            .collect();
                        (!v.is_empty()).then(|| v.join(" "))
                    } else {
                        pick(s)
                    }
                })
                .collect();
                eprintln!("iteration {iteration}: {}", parts.join(" "));
            }
            TrainEvent::CheckpointSaved { iteration, path } => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
                eprintln!(
                    "iteration {iteration}: checkpoint saved to {}",
                    path.display()
                );
            }
            TrainEvent::Finished { iteration } => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
                eprintln!("finished after iteration {iteration}");
            }
        }
    }
}
