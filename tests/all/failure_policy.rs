//! The failure policy (`[failure]` in `configs/default.toml`) end to end: `ragen-gym train` on the
//! hostile fixture and a tiny random model. A plugin that panics on every reset stops the run with
//! its first failure; one that panics on one seed loses that group (counted in `sandbox/*`), or
//! stops the run under `fail_fast`; a trajectory over its wall budget ends as a timeout. Each run
//! is watched: peak RSS under 512 MiB.
//!
//! Cost: 6 short `train` processes, about 15 s on 2 cores.

use crate::child::{Outcome, run_watched};
use crate::tiny_model;
use std::path::Path;
use std::time::Duration;

/// `train` for 2 iterations on `env` with `sets`, into `run_dir`: 4 groups of 2 members, reset
/// with seeds 10000 + 4 x rollout + group (`seed.train`), and 2 validation episodes.
fn train(model: &Path, env: &str, run_dir: &Path, sets: &[&str]) -> Outcome {
    let model = model.display().to_string();
    let run_dir = run_dir.display().to_string();
    let mut args = vec![
        "train",
        "--env",
        env,
        "--device",
        "cpu",
        "--model",
        &model,
        "--run-dir",
        &run_dir,
        "--iterations",
        "2",
    ];
    let base = [
        "es_manager.train.env_groups=4",
        "es_manager.train.group_size=2",
        "es_manager.val.env_groups=2",
        "actor.ppo_mini_batch_size=2",
        "trainer.test_freq=0",
    ];
    for s in base.iter().chain(sets) {
        args.extend(["--set", s]);
    }
    let out = run_watched(&args, &[], Duration::from_secs(120), 1024);
    assert!(
        out.killed.is_none(),
        "killed for {:?}: {}",
        out.killed,
        out.stderr
    );
    assert!(
        out.peak_rss_mib < 512.0,
        "peak RSS {} MiB: {}",
        out.peak_rss_mib,
        out.stderr
    );
    out
}

/// The `sandbox/*` counters and `rollout/excluded_groups` of each training iteration.
fn counters(run_dir: &Path) -> Vec<[f64; 5]> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["iteration"].as_u64() > Some(0))
        .map(|v| {
            [
                "sandbox/traps",
                "sandbox/timeouts",
                "sandbox/retries",
                "sandbox/dropped_groups",
                "rollout/excluded_groups",
            ]
            .map(|k| {
                v[k].as_f64()
                    .unwrap_or_else(|| panic!("{k} missing in {v}"))
            })
        })
        .collect()
}

#[test]
fn a_plugin_failing_every_episode_stops_the_run_with_its_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = train(
        &model,
        env!("FIXTURE_HOSTILE"),
        &dir.path().join("run"),
        &[r#"env.config="panic""#],
    );
    assert_eq!(out.code, Some(13), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "env plugin hostile/Hostile-v0 failed 8 of 8 training trajectories in iteration 1, \
             more than failure.max_failure_rate = 0.5; the first (group 0, seed 10000): reset \
             failed: from plugin \"hostile/Hostile-v0\""
        ) && out.stderr.contains("hostile plugin panicked on purpose"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_rare_trap_drops_its_group_or_stops_a_fail_fast_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    // seed 10003 (group 3 of iteration 1) is the only multiple of 10003 among the training
    // seeds 10000..=10007 and the validation seeds 123, 124
    let rare = r#"env.config="panic-seed:10003""#;
    let hostile = env!("FIXTURE_HOSTILE");
    let run = dir.path().join("drop");
    let out = train(&model, hostile, &run, &[rare]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // traps, timeouts, retries, dropped groups, excluded groups: both members of group 3
    assert_eq!(
        counters(&run),
        vec![[2.0, 0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]]
    );
    // retry: the group fails on both retries too (the trap depends on the seed only)
    let run = dir.path().join("retry");
    let out = train(&model, hostile, &run, &[rare, r#"failure.policy="retry""#]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        counters(&run),
        vec![[6.0, 0.0, 2.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]]
    );
    let out = train(
        &model,
        hostile,
        &dir.path().join("fail-fast"),
        &[rare, r#"failure.policy="fail_fast""#],
    );
    assert_eq!(out.code, Some(13), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "env plugin hostile/Hostile-v0 failed in iteration 1 (failure.policy = \
             \"fail_fast\"): group 3, seed 10003: reset failed:"
        ) && out.stderr.contains("panicked on seed 10003"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_trajectory_over_its_wall_budget_ends_as_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    // a budget of 1 ns: every reset overruns it
    let out = train(
        &model,
        "bandit",
        &dir.path().join("run"),
        &["failure.trajectory_wall_s=1e-9"],
    );
    assert_eq!(out.code, Some(13), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("failed 8 of 8 training trajectories in iteration 1")
            && out
                .stderr
                .contains("wall budget exceeded: the env's calls took")
            && out
                .stderr
                .contains("over failure.trajectory_wall_s = 0.000000001"),
        "{}",
        out.stderr
    );
}

/// A config the plugin refuses at its first instance is a config error (exit code 12) naming
/// the key and the value, not a failure of no kind (exit code 1) that named only the plugin.
#[test]
fn an_env_config_the_plugin_refuses_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let out = train(
        &model,
        "bandit",
        &dir.path().join("run"),
        &["env.config={bad"],
    );
    assert_eq!(out.code, Some(12), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "invalid configuration: make the env from env.config = \"{bad\": env \
             ragen/Bandit-v0 returned an error: invalid config: config is not valid JSON"
        ),
        "{}",
        out.stderr
    );
}

/// A config refused while the trainer is set up (a LoRA rank past the model's projections) is
/// exit code 12 naming the key, and leaves no empty run directory behind.
#[test]
fn a_refused_setup_leaves_no_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let run = dir.path().join("run");
    let out = train(&model, "bandit", &run, &["model.lora_rank=100000"]);
    assert_eq!(out.code, Some(12), "{}", out.stderr);
    assert!(
        out.stderr.contains("model.lora_rank: 100000 is above"),
        "{}",
        out.stderr
    );
    assert!(!run.exists(), "{} was left behind", run.display());
}
