//! `ragen-gym eval --env PLUGIN --model CHECKPOINT|default [--set k=v]... [--json]`: the
//! validation protocol (`docs/ragen-semantics.md` §9) with a model: `es_manager.val` groups with the fixed seeds
//! `seed.val + i`, temperature `rollout.val_temperature`, the training budgets. The config is
//! layered like `train` (default, CPU profile when the model runs on the CPU, env preset, `--set`).

use crate::ExpectedError;
use crate::cmd::plugin_args::load;
use crate::cmd::run_config::base_config;
use anyhow::Context;
use ragen_gym_core::{Env, EnvCallError};
use ragen_gym_policy as pol;
use ragen_gym_sandbox::WasmEnv;
use ragen_gym_starpo::constraint::action_constraint;
use ragen_gym_starpo::{EnvPool, evaluate};
use std::path::{Path, PathBuf};

/// Load the model to evaluate: a run directory, a checkpoint directory, a policy directory
/// (Hugging Face, with or without a LoRA adapter), a `.gguf` file, or `default`.
fn load_model(
    spec: &str,
    device: &pol::Device,
) -> anyhow::Result<(pol::LlamaModel, pol::Tokenizer, PathBuf)> {
    if spec == "default" {
        let loaded = pol::load_on(&pol::default_model_path(), device)?;
        return Ok((
            loaded.frozen_model()?,
            loaded.tokenizer.clone(),
            loaded.source.clone(),
        ));
    }
    let p = Path::new(spec);
    for dir in [
        p.join("checkpoint").join("policy"),
        p.join("policy"),
        p.to_path_buf(),
    ] {
        if dir.join("config.json").exists() && dir.join("model.safetensors").exists() {
            let policy = pol::Policy::from_pretrained_on(&dir, 0, device)
                .with_context(|| format!("failed to load {}", dir.display()))?;
            return Ok((policy.sampler(), policy.tokenizer().clone(), dir));
        }
    }
    let loaded = pol::load_on(p, device).with_context(|| format!("failed to load model {spec}"))?;
    Ok((
        loaded.frozen_model()?,
        loaded.tokenizer.clone(),
        loaded.source.clone(),
    ))
}

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

/// Run the validation protocol and print `episodes`, `success_rate`, `mean_return`.
pub fn run_model(args: &super::Args, model: &str, device: &pol::Device) -> anyhow::Result<()> {
    let (env_spec, json) = (args.env.as_str(), args.json);
    let cfg = eval_config(
        env_spec,
        &args.config,
        &args.set,
        args.no_cpu_profile,
        device,
    )
    .map_err(ExpectedError::config)?;
    let n = cfg.val_batch_size();
    let mut sandbox = args.sandbox.clone();
    sandbox.max_instances = Some(u32::try_from(cfg.live_env_instances()).unwrap_or(u32::MAX));
    let plugin = load(env_spec, &sandbox)?;
    let grants = sandbox.grants()?;
    let envs = (0..n)
        .map(|_| -> Result<Box<dyn Env>, EnvCallError> {
            Ok(Box::new(WasmEnv::new(
                &plugin,
                &cfg.env.config,
                grants.clone(),
            )?))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut pool = EnvPool::new(envs);
    let (model, tokenizer, source) = load_model(model, device)?;
    let constraint =
        action_constraint(&cfg, pool.spec(), &tokenizer).map_err(ExpectedError::config)?;
    let r = evaluate(
        &cfg,
        &model,
        &tokenizer,
        constraint.as_ref(),
        &mut pool,
        cfg.seed.sampler,
        &mut |_| {},
    )
    .map_err(|e| ExpectedError::training("evaluation", e))?;
    if json {
        let v = serde_json::json!({
            "env": pool.spec().id,
            "model": source,
            "episodes": r.episodes,
            "success_rate": r.success_rate,
            "mean_return": r.mean_return,
            "metrics": r.metrics,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "env {} | model {} | {} episodes (seeds {}..)",
            pool.spec().id,
            source.display(),
            r.episodes,
            cfg.seed.val
        );
        println!("success rate  {:.4}", r.success_rate);
        println!("mean return   {:.4}", r.mean_return);
    }
    Ok(())
}
