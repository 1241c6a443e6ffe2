//! `ragen-gym eval --env PLUGIN --model CHECKPOINT|default|openai:NAME [--set k=v]... [--json]`:
//! the validation protocol (`docs/ragen-semantics.md` §9) with a model: `es_manager.val` groups
//! with the fixed seeds `seed.val + i`, temperature `rollout.val_temperature`, the training
//! budgets. The config is layered like `train` (default, CPU profile when the model runs on the CPU, env preset, `--set`).
//! An API model (`openai:NAME --base-url URL`) runs the same protocol through
//! [`super::api::ApiGenerator`].

use super::Args;
use super::api::{ApiGenerator, ApiSettings};
use crate::ExpectedError;
use crate::report::jsonl::{EnvSource, JsonlReporter};
use crate::shared::config::base_config;
use crate::shared::model::load_model;
use crate::shared::plugins::write_lock;
use crate::shared::run::RunEnvs;
use anyhow::Context;
use ragen_gym_policy as pol;
use ragen_gym_starpo::action_constraint;
use ragen_gym_starpo::policy_adapter::{PolicyGenerator, PrefixSharing};
use ragen_gym_starpo::{
    Config, EnvPool, EvalResult, Reporter, RolloutParams, RunDir, Split, TrainEvent, evaluate,
    evaluate_with,
};
use std::path::Path;
use std::time::Duration;

/// The config of `eval --model`: layered like `train`'s (default, CPU profile, env preset,
/// `RAGEN_*` variables), then the env's JSON config (`--config`) and `--set`.
fn eval_config(
    env_spec: &str,
    env_config: &str,
    set: &[String],
    no_cpu_profile: bool,
    device: &pol::Device,
) -> Result<ragen_gym_starpo::Config, ragen_gym_starpo::ConfigError> {
    let mut b =
        base_config(env_spec, device, no_cpu_profile)?.user_layers(None, std::env::vars(), &[])?;
    if !env_config.is_empty() {
        b = b.set_str("env.config", env_config, "--config")?;
    }
    for s in set {
        b = b.layer_override(s)?;
    }
    b.build()
}

/// Write the evaluation's trajectories and metrics into `dir` as a training run writes them
/// (iteration 0, split `val`), so `ragen-gym replay` can re-run them.
fn record(dir: &Path, env: EnvSource, r: &EvalResult) -> anyhow::Result<()> {
    let run = RunDir::create(dir)?;
    let mut reporter = JsonlReporter::new(run, env, r.trajectories.len());
    reporter
        .report(&TrainEvent::Trajectories {
            iteration: 0,
            split: Split::Val,
            trajectories: &r.trajectories,
            groups: &[],
        })
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut metrics = r.metrics.clone();
    metrics.insert("val-env/success_rate".into(), r.success_rate);
    metrics.insert("val-env/mean_return".into(), r.mean_return);
    reporter
        .report(&TrainEvent::Metrics {
            iteration: 0,
            metrics: &metrics,
        })
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}

/// Run the validation protocol through an OpenAI-compatible API (`--model openai:NAME`);
/// returns the result and a label of the model.
fn evaluate_api(
    args: &Args,
    name: &str,
    cfg: &Config,
    pool: &mut EnvPool,
) -> anyhow::Result<(EvalResult, String)> {
    let base_url = args
        .base_url
        .clone()
        .context("--model openai:NAME needs --base-url URL (e.g. http://127.0.0.1:8000/v1)")?;
    let mut generator = ApiGenerator::new(&ApiSettings {
        model: name.to_string(),
        base_url,
        api_key_env: args.api_key_env.clone(),
        continue_final_message: args.continue_final_message,
        concurrency: args.concurrency,
        max_retries: args.max_retries,
        request_timeout: Duration::from_secs(args.request_timeout),
        limits: args.sandbox.source.net.api_limits(args.max_response_bytes),
    })?;
    let mut p = RolloutParams::from_config(
        cfg,
        pool.spec(),
        cfg.rollout.val_temperature,
        cfg.seed.sampler,
    );
    // The server applies its own context limit (an over-long prompt is an HTTP error); every
    // active env's prompt goes in one call, so `--concurrency` bounds the requests.
    p.max_model_len = usize::MAX;
    p.generation_batch_size = cfg.val_batch_size().max(1);
    let r = evaluate_with(cfg, &mut generator, &p, pool, &mut |_| {})
        .map_err(|e| ExpectedError::training("evaluation", e))?;
    Ok((r, format!("openai:{name} at {}", generator.url())))
}

/// Run the validation protocol with a local model (`model`: see [`load_model`]); returns the
/// result and where the model came from.
fn evaluate_local(
    model: &str,
    device: &pol::Device,
    cfg: &Config,
    pool: &mut EnvPool,
) -> anyhow::Result<(EvalResult, String)> {
    let (m, tokenizer, source) = load_model(model, device)?;
    let constraint =
        action_constraint(cfg, pool.spec(), &tokenizer).map_err(ExpectedError::config)?;
    let sharing = PrefixSharing::decide(cfg, &m);
    let mut generator =
        PolicyGenerator::new(m.detached(), &tokenizer, constraint.as_ref(), sharing);
    let r = evaluate(cfg, &mut generator, pool, cfg.seed.sampler, &mut |_| {})
        .map_err(|e| ExpectedError::training("evaluation", e))?;
    Ok((r, source.display().to_string()))
}

/// Print the result: a JSON object with `--json`, else three lines.
fn print_result(
    args: &Args,
    cfg: &Config,
    env_id: &str,
    source: &str,
    r: &EvalResult,
) -> anyhow::Result<()> {
    if args.json {
        let v = serde_json::json!({
            "env": env_id,
            "model": source,
            "episodes": r.episodes,
            "success_rate": r.success_rate,
            "mean_return": r.mean_return,
            "metrics": r.metrics,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "env {env_id} | model {source} | {} episodes (seeds {}..)",
            r.episodes, cfg.seed.val
        );
        println!("success rate  {:.4}", r.success_rate);
        println!("mean return   {:.4}", r.mean_return);
    }
    Ok(())
}

/// Run the validation protocol and print `episodes`, `success_rate`, `mean_return`.
pub fn run_model(args: &Args, model: &str, device: &pol::Device) -> anyhow::Result<()> {
    let cfg = eval_config(
        &args.env,
        &args.config,
        &args.set,
        args.no_cpu_profile,
        device,
    )
    .map_err(ExpectedError::config)?;
    let envs = RunEnvs::load(&args.sandbox, &cfg, &args.env, 0)?;
    let mut pool = EnvPool::from_factory(&envs.factory(&cfg), cfg.val_batch_size())?;
    let (r, source) = match model.strip_prefix("openai:") {
        Some(name) => evaluate_api(args, name, &cfg, &mut pool)?,
        None => evaluate_local(model, device, &cfg, &mut pool)?,
    };
    if let Some(dir) = &args.run_dir {
        let env = EnvSource {
            plugin: envs.lock.reference.clone(),
            plugin_sha256: envs.lock.digest.hex(),
            env_config: cfg.env.config.clone(),
        };
        record(dir, env, &r)?;
        write_lock(dir, vec![envs.lock])?;
    }
    print_result(args, &cfg, &pool.spec().id, &source, &r)
}
