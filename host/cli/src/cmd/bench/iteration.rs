//! `ragen-gym bench iteration --env PLUGIN [--json]`: one RAGEN-shaped StarPO iteration (rollout,
//! scoring of old log-probs and values, critic update, actor update) through the real trainer,
//! with prefix sharing on and off in the same run (issue #10, item 5).
//!
//! Each round runs one iteration with `rollout.prefix_sharing` on and one with it off, in
//! alternating order (on/off, then off/on), each with a fresh trainer on the same config and
//! seeds, so both sides sample the same tokens (`same_rollout` checks it) and do the same work
//! but for prefilling. Figures are medians over the rounds; peak memory is the process's peak
//! RSS during the iteration (reset before each). The shape is RAGEN's 8 groups x 16 rollouts
//! (`--groups`, `--group-size`) with the config layers of `ragen-gym train` (the CPU profile on
//! a CPU, then the env preset) for turns and lengths. See `docs/benchmarks.md`.

use std::time::Instant;

use anyhow::Context;
use ragen_gym_starpo::{Metrics, Silent, TrainSetup, Trainer};
use serde_json::{Value, json};

use super::policy::{peak_rss_mib, reset_peak_rss};
use crate::cmd::plugin_args::{SandboxArgs, env_factory, load};
use crate::cmd::run_config::base_config;

/// Arguments of `bench iteration`.
#[derive(clap::Args)]
pub struct IterationArgs {
    /// The env plugin: a built-in name (`bandit`, `sokoban`, `frozenlake`) or a `.wasm` file.
    #[arg(long = "env", value_name = "PLUGIN")]
    pub env: String,
    /// The model: `default` (SmolLM2-135M-Instruct), a `.gguf` file or a Hugging Face directory.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Env groups per iteration (RAGEN `es_manager.train.env_groups`).
    #[arg(long, default_value_t = 8)]
    pub groups: usize,
    /// Rollouts per group (RAGEN `es_manager.train.group_size`).
    #[arg(long, default_value_t = 16)]
    pub group_size: usize,
    /// Rounds; each runs one iteration with sharing and one without.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Override one config key, `section.key=value` (repeatable), e.g.
    /// `--set agent_proxy.max_turn=5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Do not apply the CPU profile even when running on the CPU.
    #[arg(long)]
    pub no_cpu_profile: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: crate::cmd::device_args::DeviceArgs,
}

/// The timings of one iteration.
struct Run {
    sharing: bool,
    seconds: f64,
    sampling_s: f64,
    scoring_s: f64,
    critic_s: f64,
    actor_s: f64,
    peak_mib: f64,
    metrics: Metrics,
}

impl Run {
    fn json(&self) -> Value {
        let get = |k: &str| self.metrics.get(k).copied();
        json!({
            "prefix_sharing": self.sharing,
            "seconds": self.seconds,
            "sampling_s": self.sampling_s,
            "scoring_s": self.scoring_s,
            "critic_s": self.critic_s,
            "actor_s": self.actor_s,
            "peak_mib": self.peak_mib,
            "kept_trajectories": get("rollout/kept_trajectories"),
            "mean_response_tokens": get("train/response_length"),
            "prefilled_token_frac": get("rollout/prefilled_token_frac"),
            "prefix_cache_peak_mib": get("rollout/prefix_cache_peak_mib"),
            "old_log_prob": get("rollout/old_log_prob"),
            "score_mean": get("critic/score/mean"),
        })
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Metrics that depend only on the sampled tokens (equal with and without sharing).
const ROLLOUT_KEYS: [&str; 3] = [
    "train/response_length",
    "rollout/kept_trajectories",
    "rollout/old_log_prob",
];

/// Run the benchmark.
pub fn run(args: IterationArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    let device = args.device.open()?;
    let scratch =
        std::env::temp_dir().join(format!("ragen-gym-bench-iteration-{}", std::process::id()));
    let result = measure(&args, &device, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let runs = result?;
    let side = |on: bool| -> Vec<&Run> { runs.iter().filter(|r| r.sharing == on).collect() };
    let med = |rs: &[&Run], f: fn(&Run) -> f64| median(rs.iter().map(|r| f(r)).collect());
    let (on, off) = (side(true), side(false));
    let summary = |rs: &[&Run]| {
        json!({
            "seconds": med(rs, |r| r.seconds),
            "sampling_s": med(rs, |r| r.sampling_s),
            "scoring_s": med(rs, |r| r.scoring_s),
            "critic_s": med(rs, |r| r.critic_s),
            "actor_s": med(rs, |r| r.actor_s),
            "peak_mib": med(rs, |r| r.peak_mib),
        })
    };
    // Metrics of a later run that differ from the first run's: (key, first, later).
    let differ: Vec<(&str, Option<f64>, Option<f64>)> = runs
        .iter()
        .flat_map(|r| ROLLOUT_KEYS.iter().map(move |k| (*k, r)))
        .filter_map(|(k, r)| {
            let (a, b) = (runs[0].metrics.get(k).copied(), r.metrics.get(k).copied());
            let same = match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-4 * a.abs().max(1.0),
                (a, b) => a.is_none() && b.is_none(),
            };
            (!same).then_some((k, a, b))
        })
        .collect();
    let same_rollout = differ.is_empty();
    let seconds = med(&on, |r| r.seconds);
    let seconds_without = med(&off, |r| r.seconds);
    let mut out = summary(&on);
    let o = out.as_object_mut().expect("an object");
    o.insert("seconds_without_sharing".into(), json!(seconds_without));
    o.insert("speedup".into(), json!(seconds_without / seconds));
    o.insert("without_sharing".into(), summary(&off));
    o.insert("same_rollout".into(), json!(same_rollout));
    o.insert(
        "rollout_differences".into(),
        differ
            .iter()
            .map(|(k, a, b)| json!({ "metric": k, "first": a, "other": b }))
            .collect(),
    );
    o.insert("env".into(), json!(args.env));
    o.insert("groups".into(), json!(args.groups));
    o.insert("group_size".into(), json!(args.group_size));
    o.insert("rounds".into(), json!(args.rounds));
    o.insert("runs".into(), runs.iter().map(Run::json).collect());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "bench iteration --env {} ({} groups x {}, {} round(s), medians)",
            args.env, args.groups, args.group_size, args.rounds
        );
        println!(
            "{:<16}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "prefix sharing", "total s", "sample s", "score s", "critic s", "actor s", "peak MiB"
        );
        for (name, rs) in [("on", &on), ("off", &off)] {
            let s = summary(rs);
            let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "{name:<16}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.0}",
                f("seconds"),
                f("sampling_s"),
                f("scoring_s"),
                f("critic_s"),
                f("actor_s"),
                f("peak_mib")
            );
        }
        println!("speedup with sharing: {:.2}x", seconds_without / seconds);
        for (k, a, b) in &differ {
            println!(
                "warning: the rollouts differ: {k} is {a:?} in the first run, {b:?} in another"
            );
        }
    }
    Ok(())
}

/// Every round's two iterations, in alternating order.
fn measure(
    args: &IterationArgs,
    device: &ragen_gym_policy::Device,
    scratch: &std::path::Path,
) -> anyhow::Result<Vec<Run>> {
    let live = args.groups * args.group_size + 256;
    let sandbox = SandboxArgs {
        max_instances: Some(u32::try_from(live).unwrap_or(u32::MAX)),
        ..SandboxArgs::default()
    };
    let plugin = load(&args.env, &sandbox)?;
    let sha = plugin.info().sha256.clone();
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for sharing in order {
            let mut b = base_config(&args.env, device, args.no_cpu_profile)?.user_layers(
                None,
                std::iter::empty(),
                &args.set,
            )?;
            if let Some(m) = &args.model {
                b = b.set_str("model.path", m, "--model")?;
            }
            for o in [
                format!("es_manager.train.env_groups={}", args.groups),
                format!("es_manager.train.group_size={}", args.group_size),
                "trainer.total_training_steps=1".into(),
                format!("rollout.prefix_sharing={sharing}"),
            ] {
                b = b.layer_override(&o)?;
            }
            let config = b.build()?;
            let make_env = env_factory(
                plugin.clone(),
                config.env.config.clone(),
                Default::default(),
            );
            let run_dir = scratch.join(format!("run-{round}-{sharing}"));
            let mut trainer = Trainer::new(TrainSetup {
                config,
                make_env,
                plugin_sha256: sha.clone(),
                env_source: args.env.clone(),
                reward_functions: vec![],
                run_dir: run_dir.clone(),
                resume: false,
                device: device.clone(),
            })
            .with_context(|| format!("failed to set up the trainer in {}", run_dir.display()))?;
            reset_peak_rss();
            let t = Instant::now();
            let metrics = trainer.iterate(&mut Silent)?;
            let seconds = t.elapsed().as_secs_f64();
            let get = |k: &str| metrics.get(k).copied().unwrap_or(f64::NAN);
            let run = Run {
                sharing,
                seconds,
                sampling_s: get("timing_s/gen"),
                scoring_s: get("timing_s/old_log_prob"),
                critic_s: get("timing_s/update_critic"),
                actor_s: get("timing_s/update_actor"),
                peak_mib: peak_rss_mib().unwrap_or(f64::NAN),
                metrics,
            };
            if !args.json {
                eprintln!(
                    "round {} sharing {}: {:.1} s (sampling {:.1} s)",
                    round + 1,
                    if sharing { "on" } else { "off" },
                    run.seconds,
                    run.sampling_s
                );
            }
            runs.push(run);
            drop(trainer);
            let _ = std::fs::remove_dir_all(&run_dir);
        }
    }
    Ok(runs)
}
