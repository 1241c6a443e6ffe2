//! `ragen-gym eval --env PLUGIN --policy random --episodes N [--seed S] [--json]`: success rate,
//! mean return and env steps per second. Episode `i` resets with seed `S + i` and the random
//! policy draws actions from a generator seeded by `S + i`, so the same seed gives the same
//! numbers (steps per second aside).

use super::plugin_args::{SandboxArgs, load, splitmix};

#[path = "eval_model.rs"]
mod eval_model;
use ragen_gym_core::Env;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The policy to evaluate.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Uniformly random action names.
    Random,
}

/// Arguments of `ragen-gym eval`.
#[derive(clap::Args)]
pub struct Args {
    /// A `.wasm` component file or a built-in name.
    #[arg(long = "env")]
    pub env: String,
    /// Which policy acts.
    #[arg(long, value_enum, default_value = "random")]
    pub policy: PolicyKind,
    /// Number of episodes.
    #[arg(long, default_value_t = 100)]
    pub episodes: u32,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The env's config as a JSON object (default: the env's defaults).
    #[arg(long, default_value = "")]
    pub config: String,
    /// Print JSON (keys `episodes`, `success_rate`, `mean_return`, `steps_per_second`).
    #[arg(long)]
    pub json: bool,
    /// Evaluate a model instead (`default`, a run or checkpoint directory, a `.gguf` file or a
    /// Hugging Face directory) with the validation protocol: `es_manager.val` groups, seeds
    /// `seed.val + i`, temperature `rollout.val_temperature` (`--episodes` and `--seed` are
    /// not used; change them with `--set es_manager.val.env_groups=N`, `--set seed.val=S`).
    #[arg(long, value_name = "CHECKPOINT|default")]
    pub model: Option<String>,
    /// With `--model`: override a training-config key, `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "model")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(model) = &args.model {
        return eval_model::run_model(&args.env, model, &args.config, &args.set, args.json, &args.sandbox);
    }
    let plugin = load(&args.env, &args.sandbox)?;
    let mut env = plugin.new_env(&args.config, args.sandbox.grants()?)?;
    let spec = env.spec().clone();
    let names = match (&spec.action_names, args.policy) {
        (Some(n), PolicyKind::Random) if !n.is_empty() => n.clone(),
        (_, PolicyKind::Random) => anyhow::bail!("the random policy needs an env with action names; {} has free-text actions", spec.id),
    };
    let (mut successes, mut total_return, mut steps, mut failed) = (0u32, 0.0f64, 0u64, 0u32);
    let mut env_time = Duration::ZERO;
    for i in 0..args.episodes {
        let seed = args.seed.wrapping_add(u64::from(i));
        let mut rng = seed;
        let t = Instant::now();
        let reset = env.reset(seed);
        env_time += t.elapsed();
        if let Err(e) = reset {
            eprintln!("episode {i} (seed {seed}) failed: {e}");
            failed += 1;
            continue;
        }
        let mut ret = 0.0;
        let mut success = false;
        for _ in 0..spec.max_episode_steps {
            let action = &names[(splitmix(&mut rng) % names.len() as u64) as usize];
            let t = Instant::now();
            let r = env.step(action);
            env_time += t.elapsed();
            steps += 1;
            match r {
                Ok(r) => {
                    ret += r.reward;
                    success |= r.success;
                    if r.terminated || r.truncated {
                        break;
                    }
                }
                Err(e) => {
                    eprintln!("episode {i} (seed {seed}) failed: {e}");
                    failed += 1;
                    break;
                }
            }
        }
        total_return += ret;
        successes += u32::from(success);
    }
    let n = f64::from(args.episodes.max(1));
    let sps = steps as f64 / env_time.as_secs_f64().max(1e-9);
    if args.json {
        let v = serde_json::json!({
            "env": spec.id,
            "policy": "random",
            "seed": args.seed,
            "episodes": args.episodes,
            "success_rate": f64::from(successes) / n,
            "mean_return": total_return / n,
            "steps": steps,
            "failed_episodes": failed,
            "steps_per_second": sps,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("env {} | policy random | {} episodes from seed {}", spec.id, args.episodes, args.seed);
        println!("success rate  {:.4}", f64::from(successes) / n);
        println!("mean return   {:.4}", total_return / n);
        println!("env steps/s   {sps:.0} ({steps} steps)");
        if failed > 0 {
            println!("failed episodes {failed}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
