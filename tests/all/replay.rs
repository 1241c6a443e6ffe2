//! `ragen-gym replay` on a real run directory: trajectories of the built-in Sokoban plugin,
//! produced by the validation rollout with a scripted policy and written by the CLI's JSONL
//! reporter, replay identically; an edited reward is caught at its step (exit code 14); another
//! plugin is refused (exit code 11) with both digests named.

use ragen_gym_cli::cmd::replay;
use ragen_gym_cli::error::exit_code_of;
use ragen_gym_cli::report::jsonl::{EnvSource, JsonlReporter};
use ragen_gym_cli::shared::config::base_config;
use ragen_gym_cli::shared::plugins::load;
use ragen_gym_cli::shared::sandbox::SandboxArgs;
use ragen_gym_core::{Env, EnvCallError};
use ragen_gym_sandbox::WasmEnv;
use ragen_gym_starpo::testing::ScriptedGenerator;
use ragen_gym_starpo::{
    EnvPool, Generation, Reporter, RolloutParams, RunDir, Split, TrainEvent, evaluate_with,
};
use std::process::ExitCode;

/// Answer `k` (0-based) of a fixed cycle of two Sokoban moves per turn.
fn moves(k: usize) -> Generation {
    const MOVES: [&str; 4] = ["Up", "Right", "Down", "Left"];
    let n = k + 1;
    Generation::text(format!(
        "</think><answer>{} || {}</answer>",
        MOVES[n % 4],
        MOVES[(n / 4) % 4]
    ))
}

fn record_run(dir: &std::path::Path) {
    let cfg = base_config("sokoban", &ragen_gym_policy::Device::Cpu, false)
        .unwrap()
        // 64 validation episodes, as the test was written for (the Sokoban preset validates 256),
        // and room for the preset's coordinate observation in the scripted generator's prompt,
        // which counts tokens more coarsely than the model's tokenizer.
        .user_layers(
            None,
            std::iter::empty(),
            &[
                "es_manager.val.env_groups=64".to_string(),
                "rollout.max_model_len=4096".to_string(),
            ],
        )
        .unwrap()
        .build()
        .unwrap();
    let plugin = load("sokoban", &SandboxArgs::default()).unwrap();
    let envs = (0..cfg.val_batch_size())
        .map(|_| -> Result<Box<dyn Env>, EnvCallError> {
            Ok(Box::new(WasmEnv::new(
                &plugin,
                &cfg.env.config,
                Default::default(),
            )?))
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let mut pool = EnvPool::new(envs);
    let p = RolloutParams::from_config(&cfg, pool.spec(), 0.0, 0);
    let r = evaluate_with(
        &cfg,
        &mut ScriptedGenerator::new(moves),
        &p,
        &mut pool,
        &mut |_| {},
    )
    .unwrap();
    assert!(
        r.trajectories.iter().all(|t| !t.turns.is_empty()),
        "{:?}",
        r.trajectories.first()
    );
    let env = EnvSource {
        plugin: "sokoban".into(),
        plugin_sha256: plugin.info().sha256.clone(),
        env_config: cfg.env.config.clone(),
    };
    let mut rep = JsonlReporter::new(RunDir::create(dir).unwrap(), env, 100);
    rep.report(&TrainEvent::Trajectories {
        iteration: 0,
        split: Split::Val,
        trajectories: &r.trajectories,
        groups: &[],
    })
    .unwrap();
    rep.report(&TrainEvent::Metrics {
        iteration: 0,
        metrics: &r.metrics,
    })
    .unwrap();
}

fn args(dir: &std::path::Path, trajectory: Option<usize>, env: Option<&str>) -> replay::Args {
    replay::Args {
        run_dir: dir.to_path_buf(),
        trajectory,
        env: env.map(str::to_string),
        sandbox: SandboxArgs::default(),
    }
}

/// Rewrite `dir/trajectories.jsonl` after `edit` changed its lines; returns the edited lines.
fn edit_trajectories(
    dir: &std::path::Path,
    edit: impl FnOnce(&mut Vec<serde_json::Value>),
) -> Vec<serde_json::Value> {
    let path = dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut lines);
    let edited: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, edited).unwrap();
    lines
}

#[test]
fn recorded_sokoban_trajectories_replay_step_by_step() {
    let d = tempfile::tempdir().unwrap();
    record_run(d.path());
    replay::run(args(d.path(), None, None)).unwrap();
    replay::run(args(d.path(), Some(1), None)).unwrap();

    // Edit the reward of line 1's first step: replay finds it at that step.
    let lines = edit_trajectories(d.path(), |lines| {
        let step = &mut lines[1]["turns"][0]["steps"][0]["outcome"]["Ok"];
        let r = step["reward"].as_f64().unwrap();
        step["reward"] = (r + 1.0).into();
    });
    replay::run(args(d.path(), Some(0), None)).unwrap();
    let err = replay::run(args(d.path(), Some(1), None)).unwrap_err();
    assert_eq!(exit_code_of(&err), ExitCode::from(14), "{err:#}");

    // Another plugin than the recorded one is refused, naming both digests.
    let err = replay::run(args(d.path(), Some(0), Some("frozenlake"))).unwrap_err();
    assert_eq!(exit_code_of(&err), ExitCode::from(11), "{err:#}");
    let msg = format!("{err:#}");
    let recorded = lines[0]["plugin_sha256"].as_str().unwrap();
    assert!(
        msg.contains(recorded) && msg.contains("differs from the recorded"),
        "{msg}"
    );
}

#[test]
fn the_run_directory_lock_pins_the_replayed_plugin() {
    use ragen_gym_registry::{Digest, LOCK_FILE_NAME, LockFile, LockedPlugin, PluginRole};
    let d = tempfile::tempdir().unwrap();
    record_run(d.path());
    // An edited line changes one trajectory's score: the turn reward no longer adds up.
    edit_trajectories(d.path(), |lines| {
        let reward = lines[0]["turns"][0]["env_reward"].as_f64().unwrap();
        lines[0]["turns"][0]["env_reward"] = (reward + 10.0).into();
    });
    let err = replay::run(args(d.path(), Some(0), None)).unwrap_err();
    assert_eq!(exit_code_of(&err), ExitCode::from(14), "{err:#}");
    replay::run(args(d.path(), Some(1), None)).unwrap();

    // A lock in the run directory whose sokoban digest is another plugin's refuses the replay
    // without --locked; --env (a patched plugin) does not read it.
    let lock = LockFile {
        plugins: vec![LockedPlugin {
            role: PluginRole::Env,
            reference: "sokoban".into(),
            digest: Digest::of(b"another plugin"),
            oci_manifest: None,
            id: "ragen/SimpleSokoban-v0".into(),
            version: "0.1.0".into(),
            interface_version: "0.1.0".into(),
        }],
        ..LockFile::default()
    };
    lock.write(&d.path().join(LOCK_FILE_NAME)).unwrap();
    let err = replay::run(args(d.path(), Some(1), None)).unwrap_err();
    assert_eq!(exit_code_of(&err), ExitCode::from(11), "{err:#}");
    assert!(format!("{err:#}").contains(LOCK_FILE_NAME), "{err:#}");
    replay::run(args(d.path(), Some(1), Some("sokoban"))).unwrap();
}
