//! `ragen-gym eval --env PLUGIN --policy random|expert --episodes N [--seed S] [--json]`: success
//! rate, mean return and env steps per second. Episode `i` resets with seed `S + i`; the random
//! policy draws actions from a generator seeded by `S + i`, the expert policy takes the plugin's
//! expert's preferred action before every step (`ragen:gym/expert`, closed loop), so the same
//! seed gives the same numbers (steps per second aside). With `--model` (a checkpoint, `default`, or an API model
//! `openai:NAME --base-url URL`), RAGEN's validation protocol (`model`).

pub mod api;
mod model;
pub mod openai;

use crate::shared::device::DeviceArgs;
use crate::shared::plugins::{load_into, write_lock};
use crate::shared::run::new_env;
use crate::shared::sandbox::SandboxArgs;
use ragen_gym_core::{Env, EnvSpec, ExpertInfo, splitmix64};
use ragen_gym_registry::PluginRole;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The policy to evaluate.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Uniformly random action names.
    Random,
    /// The plugin's expert: its preferred action from each state (the optimum line when the
    /// expert is optimal). A plugin without an expert is an error naming it.
    Expert,
}

impl PolicyKind {
    fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Expert => "expert",
        }
    }
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
    /// Number of episodes of `--policy` (refused with `--model`, whose validation protocol
    /// takes `--set es_manager.val.env_groups=N`).
    #[arg(long, default_value_t = 100, conflicts_with = "model",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub episodes: u32,
    /// Base seed of `--policy` (refused with `--model`: `--set seed.val=S`).
    #[arg(long, default_value_t = 0, conflicts_with = "model")]
    pub seed: u64,
    /// The env's config as a JSON object (default: the env's defaults).
    #[arg(long, default_value = "")]
    pub config: String,
    /// Print JSON (keys `episodes`, `success_rate`, `mean_return`, `steps_per_second`).
    #[arg(long)]
    pub json: bool,
    /// Evaluate a model instead (`default`, a run or checkpoint directory, a `.gguf` file, a
    /// Hugging Face directory, or `openai:NAME` for an OpenAI-compatible API with `--base-url`)
    /// with the validation protocol: `es_manager.val` groups, seeds `seed.val + i`, temperature
    /// `rollout.val_temperature` (`--episodes` and `--seed` are refused with it, as they were once
    /// silently ignored; `--set es_manager.val.env_groups=N`, `--set seed.val=S` change them).
    #[arg(long, value_name = "CHECKPOINT|default|openai:NAME")]
    pub model: Option<String>,
    /// With `--model openai:NAME`: the endpoint base, e.g. `http://127.0.0.1:8000/v1`
    /// (requests go to `URL/chat/completions`).
    #[arg(long = "base-url", value_name = "URL", requires = "model")]
    pub base_url: Option<String>,
    /// With an API model: the environment variable holding the API key (sent as a bearer token;
    /// nothing is sent when it is unset).
    #[arg(
        long = "api-key-env",
        value_name = "VAR",
        default_value = "OPENAI_API_KEY"
    )]
    pub api_key_env: String,
    /// With an API model: send the rollout's forced assistant prefix (`<answer>`, or `<think>`)
    /// as a final assistant message for the server to continue (vLLM's
    /// `continue_final_message`, which `ragen-gym serve` and vLLM understand), so the model
    /// sees exactly the prompt of an in-process `eval`. Without it the prefix is not sent (chat
    /// APIs start a new assistant message) and is prepended to the returned text.
    #[arg(long = "continue-final-message")]
    pub continue_final_message: bool,
    /// With an API model: most requests in flight (RAGEN `model_config.max_concurrency`: 16).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// With an API model: retries per request on HTTP 429 and 5xx and on connection failures,
    /// with exponential backoff (0.5 s doubling, at most 30 s, or the server's Retry-After).
    #[arg(long = "max-retries", default_value_t = 5)]
    pub max_retries: u32,
    /// With an API model: seconds an attempt may wait for the response headers (a request and
    /// all its retries end by `--max-time`).
    #[arg(
        long = "request-timeout",
        value_name = "SECONDS",
        default_value_t = 600
    )]
    pub request_timeout: u64,
    /// With an API model: largest response accepted, bytes (counted as they arrive).
    #[arg(long = "max-response-bytes", value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_response_bytes: u64,
    /// Write `ragen-gym.lock` into DIR (and, with `--model`, `trajectories.jsonl` and
    /// `metrics.jsonl`, so `ragen-gym replay DIR` can re-run the episodes).
    #[arg(long = "run-dir", value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// With `--model`: override a training-config key, `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "model")]
    pub set: Vec<String>,
    /// With `--model`: do not apply the CPU profile even without a GPU.
    #[arg(long, requires = "model")]
    pub no_cpu_profile: bool,
    /// Sandbox limits and capability grants.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// With `--model`: where the model runs.
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// What the policy's episodes add up to.
#[derive(Default)]
struct Tally {
    successes: u32,
    total_return: f64,
    steps: u64,
    failed: u32,
    env_time: Duration,
    /// Expert policy: the sum of the success probabilities its first advice stated, and how
    /// many episodes stated one.
    claimed: f64,
    claims: u32,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(model) = &args.model {
        return model::run_model(&args, model, &args.device.open()?);
    }
    let sandbox = args.sandbox.sandbox(0)?;
    let (plugin, lock) = load_into(&sandbox, &args.env, PluginRole::Env, &args.sandbox.source)?;
    if let Some(dir) = &args.run_dir {
        std::fs::create_dir_all(dir)?;
        write_lock(dir, vec![lock])?;
    }
    let mut env = new_env(&plugin, &args.config, args.sandbox.grants()?)?;
    let spec = env.spec().clone();
    let expert = match args.policy {
        PolicyKind::Random => None,
        PolicyKind::Expert => Some(require_expert(env.as_mut())?),
    };
    let mut tally = Tally::default();
    for i in 0..args.episodes {
        episode(env.as_mut(), &spec, args.policy, i, args.seed, &mut tally)?;
    }
    print_tally(&args, &spec, expert.as_ref(), &tally)
}

/// The env's expert, or the error naming its plugin when it has none.
fn require_expert(env: &mut dyn Env) -> anyhow::Result<ExpertInfo> {
    if let Some(info) = env.expert_info()? {
        return Ok(info);
    }
    // `advise` says why there is none (an old-contract plugin, or none for this config).
    Err(match env.advise() {
        Err(e) => e.into(),
        Ok(_) => anyhow::anyhow!("{} has no expert for this config", env.spec().id),
    })
}

/// Episode `i`: reset with seed `base + i` and act with `policy` (uniformly at random from a
/// generator seeded the same, or the expert's preferred action), until the episode ends, runs
/// out of steps or the expert has no move. An env failure ends the episode and counts as failed.
fn episode(
    env: &mut dyn Env,
    spec: &EnvSpec,
    policy: PolicyKind,
    i: u32,
    base: u64,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let seed = base.wrapping_add(u64::from(i));
    let t = Instant::now();
    let reset = env.reset(seed);
    tally.env_time += t.elapsed();
    let mut run = Run {
        env,
        i,
        seed,
        ret: 0.0,
        success: false,
    };
    match reset {
        Ok(r) => match policy {
            PolicyKind::Random => random_steps(&mut run, spec, r.observation, tally)?,
            PolicyKind::Expert => expert_steps(&mut run, spec, tally),
        },
        Err(e) => run.fail(tally, &e),
    }
    tally.total_return += run.ret;
    tally.successes += u32::from(run.success);
    Ok(())
}

/// One episode in progress: its env, index, seed, return and success so far.
struct Run<'a> {
    env: &'a mut dyn Env,
    i: u32,
    seed: u64,
    ret: f64,
    success: bool,
}

impl Run<'_> {
    /// An env failure: it ends the episode and counts as failed.
    fn fail(&self, tally: &mut Tally, e: &dyn std::fmt::Display) {
        eprintln!("episode {} (seed {}) failed: {e}", self.i, self.seed);
        tally.failed += 1;
    }

    /// Step with `action`; the next observation while the episode goes on, `None` when it
    /// ended or failed.
    fn step(&mut self, action: &str, tally: &mut Tally) -> Option<String> {
        let t = Instant::now();
        let r = self.env.step(action);
        tally.env_time += t.elapsed();
        tally.steps += 1;
        match r {
            Ok(r) => {
                self.ret += r.reward;
                self.success |= r.success;
                (!(r.terminated || r.truncated)).then_some(r.observation)
            }
            Err(e) => {
                self.fail(tally, &e);
                None
            }
        }
    }
}

/// The random policy from `observation`. Discrete envs: the spec's action names. Free-text envs
/// (e.g. the WebShop bridge): the actions listed on the observation's `Available actions:` line
/// (RAGEN's WebShop format).
fn random_steps(
    run: &mut Run<'_>,
    spec: &EnvSpec,
    mut observation: String,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let fixed_names = spec.action_names.as_ref().filter(|n| !n.is_empty());
    let mut rng = run.seed;
    for _ in 0..spec.max_episode_steps {
        let listed;
        let names: &[String] = match fixed_names {
            Some(n) => n,
            None => {
                listed = listed_actions(&observation);
                if listed.is_empty() {
                    anyhow::bail!(
                        "the random policy needs action names: {} has none in its spec and its observation lists no `Available actions:`",
                        spec.id
                    );
                }
                &listed
            }
        };
        let action = &names[(splitmix64(&mut rng) % names.len() as u64) as usize];
        match run.step(action, tally) {
            Some(next) => observation = next,
            None => break,
        }
    }
    Ok(())
}

/// The expert policy: its preferred action before every step (closed loop), recording the
/// success probability its first advice states.
fn expert_steps(run: &mut Run<'_>, spec: &EnvSpec, tally: &mut Tally) {
    for step in 0..spec.max_episode_steps {
        let t = Instant::now();
        let advice = run.env.advise();
        tally.env_time += t.elapsed();
        let advice = match advice {
            Ok(a) => a,
            Err(e) => return run.fail(tally, &e),
        };
        if step == 0
            && let Some(p) = advice.success_probability
        {
            tally.claimed += p;
            tally.claims += 1;
        }
        let Some(action) = advice.actions.first() else {
            return;
        };
        if run.step(action, tally).is_none() {
            return;
        }
    }
}

/// The success rate of `policy` (random, or the env's expert) over one episode per seed in
/// `seeds` (e.g. a run's validation seeds), each played as `eval --policy P --seed SEED` plays
/// its first episode.
///
/// # Errors
/// As [`episode`].
pub(crate) fn success_rate(
    env: &mut dyn Env,
    seeds: &[u64],
    policy: PolicyKind,
) -> anyhow::Result<f64> {
    let spec = env.spec().clone();
    let mut tally = Tally::default();
    for &seed in seeds {
        episode(env, &spec, policy, 0, seed, &mut tally)?;
    }
    Ok(f64::from(tally.successes) / seeds.len().max(1) as f64)
}

/// Print success rate, mean return and env steps per second (JSON with `--json`); for the
/// expert, what it is and the mean success probability its first advice stated.
fn print_tally(
    args: &Args,
    spec: &EnvSpec,
    expert: Option<&ExpertInfo>,
    tally: &Tally,
) -> anyhow::Result<()> {
    let n = f64::from(args.episodes);
    let sps = tally.steps as f64 / tally.env_time.as_secs_f64().max(1e-9);
    let success_rate = f64::from(tally.successes) / n;
    let claimed = (tally.claims > 0).then(|| tally.claimed / f64::from(tally.claims));
    if args.json {
        let mut v = serde_json::json!({
            "env": spec.id,
            "policy": args.policy.name(),
            "seed": args.seed,
            "episodes": args.episodes,
            "success_rate": success_rate,
            "mean_return": tally.total_return / n,
            "steps": tally.steps,
            "failed_episodes": tally.failed,
            "steps_per_second": sps,
        });
        if let Some(e) = expert {
            v["expert"] = serde_json::json!({
                "description": e.description,
                "optimal": e.optimal,
                "mean_claimed_success": claimed,
            });
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "env {} | policy {} | {} episodes from seed {}",
            spec.id,
            args.policy.name(),
            args.episodes,
            args.seed
        );
        if let Some(e) = expert {
            let kind = if e.optimal { "optimal" } else { "not optimal" };
            println!("expert        {} ({kind})", e.description);
            if let Some(p) = claimed {
                println!("claimed       {p:.4} (mean success probability at reset)");
            }
        }
        println!("success rate  {success_rate:.4}");
        println!("mean return   {:.4}", tally.total_return / n);
        println!("env steps/s   {sps:.0} ({} steps)", tally.steps);
        if tally.failed > 0 {
            println!("failed episodes {}", tally.failed);
        }
    }
    Ok(())
}

/// Actions listed on the last `Available actions: a, b, ...` line of a free-text observation
/// (the WebShop bridge's format, after RAGEN's WebShop env). A `search[<content>]` template is
/// filled with the task instruction, the third ` [SEP] `-separated field of the observation
/// when present.
fn listed_actions(observation: &str) -> Vec<String> {
    let Some((page, listed)) = observation.rsplit_once("Available actions: ") else {
        return Vec::new();
    };
    let instruction = page.split(" [SEP] ").nth(2).unwrap_or("item").trim();
    listed
        .lines()
        .next()
        .unwrap_or("")
        .split(", ")
        .filter(|a| !a.is_empty())
        .map(|a| a.replace("<content>", instruction))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::listed_actions;
    use crate::app::Cli;
    use clap::Parser;

    /// `--episodes` and `--seed` set the episodes of `--policy`; with `--model` the validation
    /// protocol's config sets them, and passing them is a usage error that names the flag (they
    /// were silently ignored: `--episodes 64` ran the Sokoban preset's 256).
    #[test]
    fn episodes_and_seed_are_refused_with_a_model() {
        let parse = |extra: &[&str]| {
            let base = ["ragen-gym", "eval", "--env", "sokoban"];
            Cli::try_parse_from(base.iter().chain(extra))
        };
        for flag in ["--episodes", "--seed"] {
            let err = parse(&["--model", "default", flag, "64"])
                .err()
                .unwrap_or_else(|| panic!("{flag} with --model was accepted"));
            assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
            assert!(err.to_string().contains(flag), "{err}");
        }
        assert!(parse(&["--episodes", "64", "--seed", "3"]).is_ok());
        assert!(parse(&["--model", "default"]).is_ok());
    }

    #[test]
    fn listed_actions_fill_the_search_template() {
        let obs = "WebShop [SEP] Instruction: [SEP] i need red shoes [SEP] Search\nAvailable actions: search[<content>], click[back to search]";
        assert_eq!(
            listed_actions(obs),
            vec![
                "search[i need red shoes]".to_string(),
                "click[back to search]".to_string()
            ]
        );
        assert!(listed_actions("no list here").is_empty());
    }
}
