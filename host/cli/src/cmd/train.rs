//! `ragen-gym train --env PLUGIN [--model M] [--config FILE] [--set k=v]... [--iterations N]
//! [--run-dir DIR] [--resume DIR] [--allow-host H:P]`: StarPO / StarPO-S training.
//!
//! Config layers, lowest first: the embedded default, the CPU profile (`configs/cpu.toml`, when
//! the model runs on the CPU, unless `--no-cpu-profile`), the env preset (`configs/<env>.toml` for a built-in),
//! `--config FILE`, `RAGEN_<SECTION>__<KEY>` variables, `--set`, then `--model` / `--iterations`.
//! With `--resume DIR` the run's own `config.toml` replaces the first four layers.

use crate::ExpectedError;
use crate::cmd::eval::{PolicyKind, success_rate};
use crate::report::Reporters;
use crate::report::jsonl::{EnvSource, JsonlReporter};
use crate::report::progress::ProgressReporter;
use crate::report::summary::{Reference, SummaryReporter};
use crate::report::tensorboard::TensorBoardReporter;
use crate::shared::config::base_config;
use crate::shared::device::DeviceArgs;
use crate::shared::plugins::{load_reward_functions, write_lock};
use crate::shared::run::{RunEnvs, new_env};
use crate::shared::sandbox::SandboxArgs;
use anyhow::Context;
use ragen_gym_core::{EnvCallError, EnvError};
use ragen_gym_policy::Device;
use ragen_gym_starpo::seeds::group_seeds;
use ragen_gym_starpo::{
    Config, ConfigBuilder, ConfigError, RunDir, TrainError, TrainSetup, Trainer,
};
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
    /// Do not apply the CPU profile even when running on the CPU.
    #[arg(long)]
    pub no_cpu_profile: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: DeviceArgs,
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

/// The layers above the files: `--config FILE`, environment variables, `--set`, `--model`,
/// `--iterations` (also `sft`'s).
pub(crate) fn user_config(
    builder: ConfigBuilder,
    config: Option<&Path>,
    set: &[String],
    model: Option<&str>,
    iterations: Option<u32>,
) -> Result<Config, ConfigError> {
    let mut b = builder.user_layers(config, std::env::vars(), set)?;
    if let Some(m) = model {
        b = b.set_str("model.path", m, "--model")?;
    }
    if let Some(n) = iterations {
        b = b.layer_override(&format!("trainer.total_training_steps={n}"))?;
    }
    b.build()
}

/// Remove the run directory `created` (one this command made) when the setup failed before
/// writing anything there but its lock file: a refused config left an empty directory behind.
/// A directory holding anything else is kept.
pub(crate) fn remove_unused_run_dir(created: Option<&Path>) {
    if let Some(dir) = created {
        if let Ok(run) = RunDir::open(dir) {
            let _ = std::fs::remove_file(run.lock_path());
        }
        let _ = std::fs::remove_dir(dir);
    }
}

/// `runs/<env>-<unix time>`: a new run's directory unless `--run-dir` names one.
pub(crate) fn default_run_dir(env: &str) -> PathBuf {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("runs").join(format!("{}-{t}", env_name(env)))
}

/// The config layers of the run in `dir` (its own `config.toml`) and its env plugin: `env` when
/// given, else the one its `run.json` names (`train --resume`, `sft --resume`).
pub(crate) fn resumed_base(
    dir: &std::path::Path,
    env: Option<&str>,
) -> anyhow::Result<(ConfigBuilder, String)> {
    let run = RunDir::open(dir)?;
    let env = match env {
        Some(e) => e.to_string(),
        None => run.read_run_info()?.env_source,
    };
    let builder = run.resume_config().map_err(ExpectedError::config)?;
    Ok((builder, env))
}

/// The run's config layers below the user's (the run's own `config.toml` with `--resume`), the
/// env plugin and the run directory.
fn run_base(args: &Args, device: &Device) -> anyhow::Result<(ConfigBuilder, String, PathBuf)> {
    if let Some(dir) = &args.resume {
        let (builder, env) = resumed_base(dir, args.env.as_deref())?;
        return Ok((builder, env, dir.clone()));
    }
    let env = args
        .env
        .clone()
        .context("--env PLUGIN is required (or --resume DIR)")?;
    let b = base_config(&env, device, args.no_cpu_profile).map_err(ExpectedError::config)?;
    let dir = args
        .run_dir
        .clone()
        .unwrap_or_else(|| default_run_dir(&env));
    Ok((b, env, dir))
}

/// The reference policies' success rates on the run's validation seeds (`seed.val + i`, as
/// `ragen-gym eval --policy P` plays them), for the closing summary: the random policy when the
/// env has action names (otherwise it needs the observation's action list), and the env's
/// expert when it has one for this config (the optimum line when the expert is optimal).
pub(crate) fn references(envs: &RunEnvs, config: &Config) -> anyhow::Result<Vec<Reference>> {
    // the run's first env instance: a config the plugin refuses is a config error naming its key
    let mut env = new_env(&envs.plugin, &config.env.config, envs.grants.clone()).map_err(|e| {
        let invalid = matches!(
            &e,
            EnvCallError::Env {
                error: EnvError::InvalidConfig(_),
                ..
            }
        );
        let e = anyhow::Error::new(e).context(format!(
            "make the env from env.config = {:?}",
            config.env.config
        ));
        if invalid {
            ExpectedError::config(e).into()
        } else {
            e
        }
    })?;
    let v = &config.es_manager.val;
    let seeds: Vec<u64> = group_seeds(config.seed.val, v.env_groups, v.group_size)
        .into_iter()
        .map(|(_, seed)| seed)
        .collect();
    let mut out = Vec::new();
    if env
        .spec()
        .action_names
        .as_ref()
        .is_some_and(|n| !n.is_empty())
    {
        out.push(Reference {
            policy: Reference::random_label(env.spec().max_episode_steps),
            success: success_rate(env.as_mut(), &seeds, PolicyKind::Random)?,
            episodes: seeds.len(),
        });
    }
    if let Some(info) = env.expert_info()? {
        let kind = if info.optimal {
            "optimal"
        } else {
            "not optimal"
        };
        out.push(Reference {
            policy: format!("expert policy ({kind}: {})", info.description),
            success: success_rate(env.as_mut(), &seeds, PolicyKind::Expert)?,
            episodes: seeds.len(),
        });
    }
    Ok(out)
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let (builder, env_spec, run_dir) = run_base(&args, &device)?;
    let config = user_config(
        builder,
        args.config.as_deref(),
        &args.set,
        args.model.as_deref(),
        args.iterations,
    )
    .map_err(ExpectedError::config)?;

    // One sandbox for the run: the env's instances plus one per reward function.
    let envs = RunEnvs::load(&args.sandbox, &config, &env_spec, args.reward_plugin.len())?;
    let (reward_functions, reward_locks) =
        load_reward_functions(&envs.sandbox, &args.reward_plugin, &args.sandbox.source)?;
    let env_source = EnvSource {
        plugin: envs.lock.reference.clone(),
        plugin_sha256: envs.sha256(),
        env_config: config.env.config.clone(),
    };
    let log_trajectories = config.trainer.log_trajectories as usize;
    let summary = SummaryReporter::new(config.val_batch_size(), references(&envs, &config)?);
    let created = (!run_dir.exists()).then(|| run_dir.clone());
    let mut trainer = Trainer::new(TrainSetup {
        make_env: envs.factory(&config),
        plugin_sha256: envs.sha256(),
        config,
        env_source: env_spec,
        reward_functions,
        run_dir,
        resume: args.resume.is_some(),
        device,
    })
    .inspect_err(|_| remove_unused_run_dir(created.as_deref()))
    .map_err(|e| match e {
        // A setting that cannot work with this env or model (constrained decoding on an env
        // without action names, an action the tokenizer cannot spell) is a config error.
        e @ (TrainError::Config(_) | TrainError::Constraint(_)) => ExpectedError::config(e),
        e => ExpectedError::training("training setup", e),
    })?;
    eprintln!("run directory: {}", trainer.run_dir().display());
    if args.resume.is_some() && !RunDir::open(trainer.run_dir())?.has_checkpoint() {
        // allowed only before the first checkpoint was due (`Models::load`)
        eprintln!(
            "no checkpoint yet (the run stopped before its first): training starts again from \
             the model"
        );
    }
    write_lock(
        trainer.run_dir(),
        std::iter::once(envs.lock).chain(reward_locks).collect(),
    )?;
    let run = RunDir::open(trainer.run_dir())?;
    let mut reporters = Reporters(vec![
        Box::new(ProgressReporter::new()),
        Box::new(TensorBoardReporter::new(&run)),
        Box::new(JsonlReporter::new(run, env_source, log_trajectories)),
        Box::new(summary),
    ]);
    trainer
        .train(&mut reporters)
        .map_err(|e| ExpectedError::training("training", e))?;
    Ok(())
}
