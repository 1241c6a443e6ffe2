//! Exact env forks (`ragen_gym_core::fork`) through the sandbox: a fork of a recorded built-in
//! Sokoban trajectory at step k is the recorded state (on a fresh instance and on a used one),
//! what one fork step costs next to a recorded step, and a plugin whose steps keep state across
//! resets (the hostile fixture's `step-leak` mode) is named at its first difference, by `fork`
//! and by `check_env`'s fork check.

use crate::sandbox_hostile::env as hostile;
use ragen_gym_core::{Env, ForkError, check_env, fork, fork_in_place, record_actions};
use ragen_gym_sandbox::{Grants, Sandbox, SandboxConfig, WasmEnv};
use std::time::Instant;

fn sokoban() -> WasmEnv {
    let b = ragen_gym_builtins::find("sokoban").expect("built-in sokoban");
    let plugin = Sandbox::new(SandboxConfig::default())
        .expect("sandbox")
        .load_bytes(b.name, b.wasm)
        .expect("load sokoban");
    WasmEnv::new(&plugin, "", Grants::default()).expect("sokoban env")
}

/// `n` moves cycling through Sokoban's four directions with a stride that wanders the room.
fn moves(n: usize) -> Vec<String> {
    const DIRS: [&str; 4] = ["Up", "Right", "Down", "Left"];
    (0..n)
        .map(|i| DIRS[(i * 3 + i / 4) % 4].to_string())
        .collect()
}

#[test]
fn a_fork_of_a_recorded_sokoban_trajectory_is_the_recorded_state() {
    let mut rec = sokoban();
    let t = record_actions(&mut rec, 11, &moves(40)).unwrap();
    let n = t.num_actions;
    assert!(n >= 10, "the episode ran {n} steps");
    let mut used = sokoban();
    used.reset(3).unwrap();
    used.step("Up").unwrap();
    for k in [0, 1, n / 2, n - 1, n] {
        let want = t
            .turns
            .get(k)
            .map_or(&t.final_observation, |turn| &turn.observation);
        let f = fork(Box::new(sokoban()), &t, k).unwrap();
        assert_eq!(&f.point.observation, want, "fresh instance, step {k}");
        let p = fork_in_place(&mut used, &t, k).unwrap();
        assert_eq!(&p.observation, want, "used instance, step {k}");
        // the forked env goes on exactly as the record did
        if k < n {
            let next = used.step(&t.turns[k].actions[0]).unwrap();
            assert_eq!(Ok(next), t.turns[k].steps[0].outcome, "step {k}");
        }
    }
}

/// Time per env step of a fork (reset + replayed, checked steps) against recording the same
/// steps, alternated in one run on one instance. Printed with `--nocapture`; the assertion only
/// bounds the fork at 3x the recording (the checks compare strings the recording builds anyway),
/// on each side's fastest round: a round the scheduler preempted (the tests run in parallel on
/// few cores) says nothing of the work, and summed rounds failed at 5x under such load.
#[test]
fn fork_time_per_step_on_sokoban() {
    let mut env = sokoban();
    let actions = moves(100);
    let t = record_actions(&mut env, 5, &actions).unwrap();
    let n = t.num_actions;
    let (mut fork_s, mut record_s) = (f64::INFINITY, f64::INFINITY);
    let rounds = 20;
    for _ in 0..rounds {
        let t0 = Instant::now();
        fork_in_place(&mut env, &t, n).unwrap();
        fork_s = fork_s.min(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        record_actions(&mut env, 5, &actions).unwrap();
        record_s = record_s.min(t0.elapsed().as_secs_f64());
    }
    let per = |s: f64| s / n as f64 * 1e6;
    eprintln!(
        "Sokoban fork: {n} steps, {:.1} us per forked step, {:.1} us per recorded step \
         (fastest of {rounds} rounds each, alternated)",
        per(fork_s),
        per(record_s)
    );
    assert!(
        fork_s < 3.0 * record_s,
        "fastest fork round {fork_s} s, fastest recording round {record_s} s"
    );
}

#[test]
fn a_plugin_that_keeps_state_across_resets_is_named() {
    let mut env = hostile("step-leak");
    let t = record_actions(&mut env, 0, &["Go".to_string()]).unwrap();
    assert_eq!(t.final_observation, "you said Go (step 1 of this instance)");
    let e = fork_in_place(&mut env, &t, 1).unwrap_err();
    assert!(matches!(e, ForkError::Diverged { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "hostile/Hostile-v0 is not deterministic: fork at step 1 diverged: turn 0, step 0 \
         (action \"Go\"): observation recorded \"you said Go (step 1 of this instance)\", \
         replayed \"you said Go (step 2 of this instance)\""
    );
    // each episode on a fresh instance repeats, so only the fork check fails
    let report = check_env(|| Ok(Box::new(hostile("step-leak")) as Box<dyn Env>));
    assert_eq!(
        report.passed,
        ["spec", "reset_determinism", "step_determinism", "limits"]
    );
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        report.failures[0].starts_with("fork: seed 0: hostile/Hostile-v0 is not deterministic"),
        "{:?}",
        report.failures
    );
    // the well-behaved mode passes it
    let report = check_env(|| Ok(Box::new(hostile("")) as Box<dyn Env>));
    assert!(
        report.passed.contains(&"fork".to_string()),
        "{:?}",
        report.failures
    );
}
