//! `ragen-gym bench iteration --env PLUGIN [--json]`: one RAGEN-shaped StarPO iteration (rollout,
//! scoring of old log-probs and values, critic update, actor update) through the real trainer,
//! with prefix sharing on and off in the same run (`docs/benchmarks.md`, "bench iteration").
//!
//! Each round runs one iteration with `rollout.prefix_sharing` on and one with it off, in
//! alternating order (on/off, then off/on), each with a fresh trainer on the same config and
//! seeds, so both sides sample the same tokens (`same_rollout` checks it) and do the same work
//! but for prefilling. With `--baseline` the other side also turns off the update's other
//! savings (`trainer.scoring_from_update = false`, `actor.kl_after_update_freq = 1`, and
//! `actor.max_tokens_per_pass = 0`: one forward per micro-batch, no shared prompts): the
//! iteration as it ran before them. Figures are medians over the rounds; peak memory is the process's peak
//! RSS during the iteration (reset before each). The shape is RAGEN's 8 groups x 16 rollouts
//! (`--groups`, `--group-size`) with the config layers of `ragen-gym train` (the CPU profile on
//! a CPU, then the env preset) for turns and lengths.

use ragen_gym_starpo::{Config, Metrics, Silent};
use serde_json::{Value, json};

use super::harness::{gemm_gflops, gemm_peak_gflops, one_iteration};
use super::stats::median;
use crate::shared::config::base_config;
use crate::shared::device::DeviceArgs;
use crate::shared::run::RunEnvs;
use crate::shared::sandbox::SandboxArgs;

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
    /// The other side is the baseline: besides prefix sharing, the separate scoring pass and the
    /// KL-after-update pass every iteration are back on, and the update runs one forward per
    /// micro-batch (no shared prompts).
    #[arg(long)]
    pub baseline: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: DeviceArgs,
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
    /// Forward FLOPs with their backwards (`FlopCount::with_backward`).
    flops: f64,
    /// Seconds of the `actor/kl_after_update` diagnostic (every side runs it, so it is measured).
    kl_s: f64,
    /// How often the side's config runs it (`actor.kl_after_update_freq`; 0: never).
    kl_freq: u32,
    /// The policy's hidden and MLP widths.
    widths: (usize, usize),
    metrics: Metrics,
}

impl Run {
    /// The iteration with the KL diagnostic's share at the side's frequency: all of it every
    /// iteration, a tenth every 10th, none when never.
    fn amortised_s(&self) -> f64 {
        let share = match self.kl_freq {
            0 => 0.0,
            f => self.kl_s / f64::from(f),
        };
        self.seconds - self.kl_s + share
    }

    /// The iteration without the KL diagnostic (which RAGEN does not compute).
    fn without_kl_s(&self) -> f64 {
        self.seconds - self.kl_s
    }

    fn json(&self) -> Value {
        let get = |k: &str| self.metrics.get(k).copied();
        json!({
            "prefix_sharing": self.sharing,
            "seconds": self.seconds,
            "seconds_amortised": self.amortised_s(),
            "seconds_without_kl": self.without_kl_s(),
            "kl_after_update_s": self.kl_s,
            "sampling_s": self.sampling_s,
            "scoring_s": self.scoring_s,
            "critic_s": self.critic_s,
            "actor_s": self.actor_s,
            "peak_mib": self.peak_mib,
            "model_tflop": self.flops / 1e12,
            "achieved_gflops": self.flops / self.seconds / 1e9,
            "kept_trajectories": get("rollout/kept_trajectories"),
            "mean_response_tokens": get("train/response_length"),
            "prefilled_token_frac": get("rollout/prefilled_token_frac"),
            "prefix_cache_peak_mib": get("rollout/prefix_cache_peak_mib"),
            "old_log_prob": get("rollout/old_log_prob"),
            "score_mean": get("critic/score/mean"),
        })
    }
}

/// Metrics that depend only on the sampled tokens (equal with and without sharing).
const ROLLOUT_KEYS: [&str; 3] = [
    "train/response_length",
    "rollout/kept_trajectories",
    "rollout/old_log_prob",
];

/// Metrics of a later run that differ from the first run's: (key, first, later).
type Differences = Vec<(&'static str, Option<f64>, Option<f64>)>;

fn rollout_differences(runs: &[Run]) -> Differences {
    runs.iter()
        .flat_map(|r| ROLLOUT_KEYS.iter().map(move |k| (*k, r)))
        .filter_map(|(k, r)| {
            let (a, b) = (runs[0].metrics.get(k).copied(), r.metrics.get(k).copied());
            let same = match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-4 * a.abs().max(1.0),
                (a, b) => a.is_none() && b.is_none(),
            };
            (!same).then_some((k, a, b))
        })
        .collect()
}

/// The medians of the runs with sharing `on`.
fn summary(runs: &[Run], on: bool) -> Value {
    let side: Vec<&Run> = runs.iter().filter(|r| r.sharing == on).collect();
    let med = |f: fn(&Run) -> f64| median(side.iter().map(|r| f(r)).collect());
    json!({
        "seconds": med(Run::amortised_s),
        "seconds_measured": med(|r| r.seconds),
        "seconds_without_kl": med(Run::without_kl_s),
        "kl_after_update_s": med(|r| r.kl_s),
        "kl_after_update_freq": side.first().map(|r| r.kl_freq),
        "sampling_s": med(|r| r.sampling_s),
        "scoring_s": med(|r| r.scoring_s),
        "critic_s": med(|r| r.critic_s),
        "actor_s": med(|r| r.actor_s),
        "peak_mib": med(|r| r.peak_mib),
        "model_tflop": med(|r| r.flops / 1e12),
        "achieved_gflops": med(|r| r.flops / r.seconds / 1e9),
    })
}

/// The whole report: the sharing side's medians at the top level, the other side's under
/// `without_sharing`, the rollout check and every run.
fn report(args: &IterationArgs, runs: &[Run], differ: &Differences, gemm: Gemm) -> Value {
    let get = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let (mut out, off) = (summary(runs, true), summary(runs, false));
    let speedup = get(&off, "seconds") / get(&out, "seconds");
    let speedup_without_kl = get(&off, "seconds_without_kl") / get(&out, "seconds");
    let o = out.as_object_mut().expect("an object");
    let other = if args.baseline {
        "seconds_baseline"
    } else {
        "seconds_without_sharing"
    };
    o.insert(other.into(), json!(get(&off, "seconds")));
    o.insert(
        format!("{other}_without_kl"),
        json!(get(&off, "seconds_without_kl")),
    );
    o.insert("baseline".into(), json!(args.baseline));
    o.insert("speedup".into(), json!(speedup));
    o.insert("speedup_without_kl".into(), json!(speedup_without_kl));
    o.insert("without_sharing".into(), off);
    let achieved = o["achieved_gflops"].as_f64().unwrap_or(f64::NAN);
    o.insert("gemm_peak_gflops".into(), json!(gemm.peak));
    o.insert("efficiency".into(), json!(achieved / gemm.peak));
    o.insert("gemm_update_shape".into(), json!(gemm.update_shape));
    o.insert("gemm_update_gflops".into(), json!(gemm.update));
    o.insert("efficiency_update".into(), json!(achieved / gemm.update));
    o.insert("same_rollout".into(), json!(differ.is_empty()));
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
    out
}

fn print_table(args: &IterationArgs, out: &Value, differ: &Differences) {
    println!(
        "bench iteration --env {} ({} groups x {}, {} round(s), medians)",
        args.env, args.groups, args.group_size, args.rounds
    );
    println!(
        "{:<16}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "prefix sharing", "total s", "sample s", "score s", "critic s", "actor s", "peak MiB"
    );
    let off = if args.baseline { "baseline" } else { "off" };
    for (name, s) in [("on", out), (off, &out["without_sharing"])] {
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
    let speedup = out["speedup"].as_f64().unwrap_or(f64::NAN);
    println!("speedup: {speedup:.2}x");
    let f = |k: &str| out[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "model FLOPs {:.2} TFLOP, {:.1} GFLOP/s achieved, GEMM peak {:.1} GFLOP/s: efficiency {:.0} % \
         ({:.1} GFLOP/s at the update's shape {}: {:.0} %)",
        f("model_tflop"),
        f("achieved_gflops"),
        f("gemm_peak_gflops"),
        100.0 * f("efficiency"),
        f("gemm_update_gflops"),
        out["gemm_update_shape"],
        100.0 * f("efficiency_update")
    );
    println!(
        "without the KL diagnostic: {:.1} s on the other side, {:.2}x",
        out["without_sharing"]["seconds_without_kl"]
            .as_f64()
            .unwrap_or(f64::NAN),
        f("speedup_without_kl")
    );
    for (k, a, b) in differ {
        println!("warning: the rollouts differ: {k} is {a:?} in the first run, {b:?} in another");
    }
}

/// Run the benchmark.
pub fn run(args: IterationArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    let device = args.device.open()?;
    let scratch =
        std::env::temp_dir().join(format!("ragen-gym-bench-iteration-{}", std::process::id()));
    let result = measure(&args, &device, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let runs = result?;
    let differ = rollout_differences(&runs);
    let (d, i) = runs.first().map_or((0, 0), |r| r.widths);
    let update_shape = [UPDATE_GEMM_ROWS, d, i];
    let gemm = Gemm {
        peak: gemm_peak_gflops(&device, 10)?,
        update_shape,
        update: gemm_gflops(&device, update_shape, 10)?,
    };
    let out = report(&args, &runs, &differ, gemm);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&args, &out, &differ);
    }
    Ok(())
}

/// The config of one side: `train`'s layers, `--set`, `--model`, then the benchmark's shape,
/// one iteration, and prefix sharing on or off (off with `--baseline`: every saving off).
fn side_config(
    args: &IterationArgs,
    device: &ragen_gym_policy::Device,
    sharing: bool,
) -> anyhow::Result<Config> {
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
    if args.baseline && !sharing {
        for o in [
            "trainer.scoring_from_update=false",
            "actor.kl_after_update_freq=1",
            "actor.max_tokens_per_pass=0",
        ] {
            b = b.layer_override(o)?;
        }
    }
    Ok(b.build()?)
}

/// Rows of the GEMM measured at the update's shape: about the tokens of one pass of the CPU
/// profile's Bandit update (one group's prompt and members, `configs/cpu.toml`).
const UPDATE_GEMM_ROWS: usize = 512;

/// The GEMM speeds the utilisation is measured against.
#[derive(Debug, Clone, Copy)]
struct Gemm {
    /// 1024^3.
    peak: f64,
    /// `[rows, hidden] x [hidden, MLP width]`, the update's largest products.
    update_shape: [usize; 3],
    update: f64,
}

/// Every round's two iterations, in alternating order.
fn measure(
    args: &IterationArgs,
    device: &ragen_gym_policy::Device,
    scratch: &std::path::Path,
) -> anyhow::Result<Vec<Run>> {
    // Both sides keep the same envs alive; the plugin is loaded once.
    let envs = RunEnvs::load(
        &SandboxArgs::default(),
        &side_config(args, device, true)?,
        &args.env,
        0,
    )?;
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for sharing in order {
            let mut config = side_config(args, device, sharing)?;
            // Every side runs the KL diagnostic, so its cost is measured; each side's `seconds`
            // then carries the share its own frequency pays (Run::amortised_s).
            let kl_freq = config.actor.kl_after_update_freq;
            config.actor.kl_after_update_freq = 1;
            let run_dir = scratch.join(format!("run-{round}-{sharing}"));
            let it = one_iteration(config, &envs, device, &run_dir, &mut Silent);
            let _ = std::fs::remove_dir_all(&run_dir);
            let it = it?;
            let run = Run {
                sharing,
                seconds: it.seconds,
                sampling_s: it.sampling_s(),
                scoring_s: it.scoring_s(),
                critic_s: it.critic_s(),
                actor_s: it.actor_s(),
                peak_mib: it.memory.host_peak_rss_mib.unwrap_or(f64::NAN),
                flops: it.flops.with_backward() as f64,
                kl_s: Some(it.get("timing_s/kl_after_update"))
                    .filter(|s| s.is_finite())
                    .unwrap_or(0.0),
                kl_freq,
                widths: it.widths,
                metrics: it.metrics,
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
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: IterationArgs,
    }

    fn run(sharing: bool, seconds: f64, kl_s: f64, kl_freq: u32) -> Run {
        Run {
            sharing,
            seconds,
            sampling_s: 1.0,
            scoring_s: 0.0,
            critic_s: 0.0,
            actor_s: seconds - 1.0 - kl_s,
            peak_mib: 100.0,
            flops: 2e12,
            kl_s,
            kl_freq,
            widths: (576, 1536),
            metrics: Metrics::new(),
        }
    }

    #[test]
    fn the_baseline_json_reports_both_sides_with_and_without_the_kl_diagnostic() {
        let args = Cli::parse_from(["bench", "--env", "bandit", "--baseline"]).args;
        // Optimised: 10 s measured with a 2 s KL diagnostic it pays every 10th iteration, so
        // 8.2 s amortised. Baseline: 50 s with its 6 s diagnostic every iteration, 44 s without.
        let runs = [run(true, 10.0, 2.0, 10), run(false, 50.0, 6.0, 1)];
        let gemm = Gemm {
            peak: 100.0,
            update_shape: [512, 576, 1536],
            update: 80.0,
        };
        let out = report(&args, &runs, &Vec::new(), gemm);
        let f = |k: &str| out[k].as_f64().unwrap();
        assert!((f("seconds") - 8.2).abs() < 1e-12);
        assert_eq!(f("seconds_measured"), 10.0);
        assert_eq!(f("seconds_without_kl"), 8.0);
        assert_eq!(f("seconds_baseline"), 50.0);
        assert_eq!(f("seconds_baseline_without_kl"), 44.0);
        assert!((f("speedup") - 50.0 / 8.2).abs() < 1e-12);
        assert!((f("speedup_without_kl") - 44.0 / 8.2).abs() < 1e-12);
        assert_eq!(out["baseline"], json!(true));
        assert_eq!(out["kl_after_update_freq"], json!(10));
        assert_eq!(out["without_sharing"]["kl_after_update_freq"], json!(1));
        // 2 TFLOP in the 10 s measured: 200 GFLOP/s, against both GEMM figures.
        assert_eq!(f("achieved_gflops"), 200.0);
        assert_eq!(f("efficiency"), 2.0);
        assert_eq!(f("efficiency_update"), 2.5);
        assert_eq!(out["gemm_update_shape"], json!([512, 576, 1536]));
        assert_eq!(out["runs"].as_array().unwrap().len(), 2);
        assert_eq!(out["same_rollout"], json!(true));
    }
}
