//! Plugin authors, end to end (`docs/plugins.md`): `ragen-gym new` scaffolds a Rust, a Python
//! and a JavaScript env and a Rust reward function, `ragen-gym build` builds each offline,
//! `ragen-gym check` passes on each, `ragen-gym eval --policy random` runs on each env, and each
//! scaffold then plays by its rules through the sandbox. Every phase's time is printed on stderr
//! (`cargo test ... authors:: -- --nocapture`).
//!
//! The componentizers come from this checkout (`scripts/setup.sh` installs them into `.venv`
//! and `.tools/js` at the pinned versions) and `build` runs with `--no-install --offline`, so a
//! missing tool fails the test with the command that installs it. The Rust scaffolds share one
//! cargo target directory under `target/authors-tests`, so the SDK's dependencies compile once
//! per checkout.

use clap::Parser;
use ragen_gym_cli::{Cli, Command, cmd};
use ragen_gym_core::{Env, EnvCallError, EnvError, RewardFunction, Trajectory, Turn};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv, WasmRewardFunction};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Run one `ragen-gym` subcommand in this process.
fn cli(args: &[&str]) -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(std::iter::once("ragen-gym").chain(args.iter().copied()))?;
    match cli.command {
        Command::New(a) => cmd::author::new::run(a),
        Command::Build(a) => cmd::author::build::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        _ => unreachable!("the tests run new, build, check and eval"),
    }
}

/// Run `f`, print its time under `label`, and panic with the error chain if it fails.
fn timed(label: &str, f: impl FnOnce() -> anyhow::Result<()>) -> f64 {
    let start = Instant::now();
    if let Err(e) = f() {
        panic!("{label}: {e:#}");
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("[authors] {label}: {secs:.1} s");
    secs
}

/// Scaffold `name` in `lang` and `kind`, build it, check it and (for an env) evaluate the random
/// policy; returns the project directory's owner and the component.
fn scaffold_build_check(lang: &str, kind: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join(name);
    let d = dir.to_str().expect("a UTF-8 temp path");
    let shared = repo_root().join("target/authors-tests/cargo");
    let shared = shared.to_str().expect("a UTF-8 path");
    let label = format!("{lang} {kind}");
    timed(&format!("{label}: new"), || {
        cli(&["new", name, "--lang", lang, "--kind", kind, "--dir", d])
    });
    timed(&format!("{label}: build"), || {
        cli(&[
            "build",
            d,
            "--no-install",
            "--offline",
            "--target-dir",
            shared,
        ])
    });
    let wasm = dir.join("build").join(format!("{name}.wasm"));
    let w = wasm.to_str().expect("a UTF-8 path");
    timed(&format!("{label}: check"), || cli(&["check", w]));
    if kind == "env" {
        timed(&format!("{label}: eval --policy random"), || {
            cli(&[
                "eval",
                "--env",
                w,
                "--policy",
                "random",
                "--episodes",
                "32",
                "--json",
            ])
        });
    }
    (tmp, wasm)
}

fn load(path: &Path) -> Plugin {
    Sandbox::new(SandboxConfig::default())
        .expect("sandbox")
        .load_file(path)
        .expect("load the built plugin")
}

/// The guessing game every env scaffold implements: "I picked a number in 0..4.", the right
/// guess pays 1 and ends the episode, a wrong one pays 0, anything but 0-3 is invalid, and a
/// config key the env does not have is named. With `helper`, the Python or JavaScript helper
/// also answers a step after the end with `not-ready`. Returns the secret of seeds 0..8.
fn plays_the_guessing_game(plugin: &Plugin, id: &str, helper: bool) -> Vec<u64> {
    let mut env = WasmEnv::new(plugin, "", Grants::default()).expect("new env");
    assert_eq!(env.spec().id, id);
    assert_eq!(env.spec().max_episode_steps, 3);
    let mut secrets = Vec::new();
    for seed in 0..8u64 {
        let hits: Vec<u64> = (0..4u64)
            .filter(|guess| {
                let first = env.reset(seed).expect("reset").observation;
                assert_eq!(first, "I picked a number in 0..4.");
                let r = env.step(&guess.to_string()).expect("step");
                assert!(r.action_is_valid);
                assert_eq!(r.reward, if r.success { 1.0 } else { 0.0 });
                assert_eq!(r.terminated, r.success);
                r.success
            })
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "seed {seed}: exactly one guess wins: {hits:?}"
        );
        secrets.push(hits[0]);
        env.reset(seed).expect("reset");
        let bad = env
            .step("seven")
            .expect("an unknown action is not an error");
        assert!(!bad.action_is_valid && bad.reward == 0.0 && !bad.terminated);
        env.step(&hits[0].to_string()).expect("the winning guess");
        assert!(
            !helper
                || matches!(
                    env.step("0"),
                    Err(EnvCallError::Env {
                        error: EnvError::NotReady(_),
                        ..
                    })
                )
        );
    }
    match WasmEnv::new(plugin, r#"{"colour": 3}"#, Grants::default()) {
        Err(EnvCallError::Env {
            error: EnvError::InvalidConfig(m),
            ..
        }) => {
            assert!(m.contains("colour"), "{m}");
        }
        Err(e) => panic!("expected invalid-config, got {e}"),
        Ok(_) => panic!("an unknown config key was accepted"),
    }
    secrets
}

#[test]
fn a_rust_env_scaffold_builds_checks_and_plays() {
    let (_dir, wasm) = scaffold_build_check("rust", "env", "guess-rs");
    let secrets = plays_the_guessing_game(&load(&wasm), "local/GuessRs-v0", false);
    // The Rust template's secret is `seed % 4`.
    assert_eq!(secrets, [0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn a_python_env_scaffold_builds_checks_and_plays() {
    let (_dir, wasm) = scaffold_build_check("python", "env", "guess-py");
    let plugin = load(&wasm);
    let secrets = plays_the_guessing_game(&plugin, "local/GuessPy-v0", true);
    // `self.random` is `random.Random(seed)`: CPython's `Random(s).randrange(4)` for s = 0..8.
    assert_eq!(secrets, [3, 1, 0, 1, 1, 2, 0, 2]);
    assert_eq!(
        plugin.info().manifest.interface_version,
        ragen_gym_core::INTERFACE_VERSION
    );
}

#[test]
fn a_javascript_env_scaffold_builds_checks_and_plays() {
    let (_dir, wasm) = scaffold_build_check("js", "env", "guess-js");
    let secrets = plays_the_guessing_game(&load(&wasm), "local/GuessJs-v0", true);
    // `this.random` is splitmix64 seeded with the reset seed; `int(0, 3)` takes the top 53 bits
    // of its first output as a fraction of 2^53, times 4.
    let expected: Vec<u64> = (0..8u64)
        .map(|seed| {
            let mut state = seed;
            ((ragen_gym_core::splitmix64(&mut state) >> 11) * 4) >> 53
        })
        .collect();
    assert_eq!(secrets, expected);
}

#[test]
fn a_rust_reward_scaffold_builds_checks_and_scores() {
    let (_dir, wasm) = scaffold_build_check("rust", "reward", "short-rs");
    let mut f = WasmRewardFunction::new(&load(&wasm)).expect("a reward function");
    let turn = |response: &str| Turn {
        observation: "o".into(),
        actions_left: 1,
        response: response.into(),
        think: None,
        answer: None,
        actions: vec![],
        env_reward: 0.0,
        action_is_valid: false,
        action_is_effective: false,
        format_penalty: true,
        info: vec![],
        steps: vec![],
        sampled: None,
    };
    let t = Trajectory {
        env_id: "x/Y-v0".into(),
        tag: "t".into(),
        group: 0,
        seed: 0,
        turns: vec![turn("<answer>2</answer>"), turn("0123456789")],
        final_observation: String::new(),
        num_actions: 0,
        terminated: true,
        truncated: true,
        success: false,
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    };
    // -0.001 per response byte: 18 + 10 bytes.
    let r = f.score(&t).expect("score");
    assert!((r.total + 0.028).abs() < 1e-12, "{r:?}");
    assert_eq!(r.components[0].name, "length");
}
