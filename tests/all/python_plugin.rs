//! The Python example plugin (`sdk/python/example`, "guess the number"), built with
//! componentize-py by `sdk/python/build.sh`, passes `check_env` and plays by its rules in the
//! sandbox: the plugin contract is language-neutral (`docs/architecture.md` §3).
//!
//! Needs componentize-py in `.venv` (installed by `scripts/setup.sh`) or `$COMPONENTIZE_PY`;
//! without it the tests fail, naming the missing tool. The component is rebuilt only when a
//! source is newer than `target/python-plugins/guess_number.wasm`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

use ragen_gym_core::{Env, EnvCallError, EnvError, check_env};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn newest_source(root: &Path) -> SystemTime {
    let dirs = [
        root.join("sdk/python"),
        root.join("sdk/python/example"),
        root.join("sdk/python/example/wit"),
        root.join("wit"),
    ];
    dirs.iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Build (if stale) and return the component path.
///
/// # Panics
/// When componentize-py is missing or the build fails.
fn python_plugin_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = repo_root();
            let componentize = std::env::var_os("COMPONENTIZE_PY")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join(".venv/bin/componentize-py"));
            assert!(
                componentize.exists(),
                "componentize-py not found at {} (run scripts/setup.sh, or set COMPONENTIZE_PY)",
                componentize.display()
            );
            let out = root.join("target/python-plugins/guess_number.wasm");
            let fresh = std::fs::metadata(&out)
                .and_then(|m| m.modified())
                .is_ok_and(|built| built > newest_source(&root));
            if !fresh {
                let status = Command::new("bash")
                    .arg(root.join("sdk/python/build.sh"))
                    .arg(&out)
                    .env("COMPONENTIZE_PY", &componentize)
                    .status()
                    .expect("run sdk/python/build.sh");
                assert!(status.success(), "sdk/python/build.sh failed: {status}");
            }
            out
        })
        .clone()
}

/// The loaded plugin, shared by the tests so the 18 MB component is compiled once.
fn load() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            let path = python_plugin_path();
            let sandbox = Sandbox::new(SandboxConfig::default()).expect("sandbox");
            sandbox.load_file(&path).expect("load the Python plugin")
        })
        .clone()
}

#[test]
fn python_example_passes_check_env() {
    let plugin = load();
    assert_eq!(plugin.info().manifest.id, "examples/GuessNumber-v0");
    let report = check_env(|| {
        WasmEnv::new(&plugin, "", Grants::default()).map(|e| Box::new(e) as Box<dyn Env>)
    });
    assert!(report.ok, "{:?}", report.failures);
    assert_eq!(report.env_id, "examples/GuessNumber-v0");
}

#[test]
fn python_example_plays_by_its_rules() {
    let plugin = load();
    let mut env = WasmEnv::new(
        &plugin,
        r#"{"max_number": 8, "max_guesses": 4}"#,
        Grants::default(),
    )
    .expect("new env");
    assert_eq!(env.spec().max_episode_steps, 4);
    assert_eq!(env.spec().action_names.as_ref().map(Vec::len), Some(8));
    for seed in 0..10 {
        env.reset(seed).expect("reset");
        let invalid = env.step("nine").expect("invalid action is not an error");
        assert!(!invalid.action_is_valid && invalid.reward == 0.0);
        // Binary search over 1..=8 finds any secret within 4 guesses.
        let (mut lo, mut hi) = (1u32, 8u32);
        let mut solved = false;
        for _ in 0..4 {
            let guess = (lo + hi) / 2;
            let r = env.step(&guess.to_string()).expect("step");
            if r.success {
                assert!(r.terminated && r.reward == 1.0, "seed {seed}: {r:?}");
                solved = true;
                break;
            }
            assert_eq!(r.reward, 0.0);
            if r.observation.contains("higher") {
                lo = guess + 1;
            } else {
                assert!(
                    r.observation.contains("lower"),
                    "seed {seed}: {}",
                    r.observation
                );
                hi = guess - 1;
            }
        }
        assert!(solved, "seed {seed}: binary search did not find the number");
        assert!(matches!(
            env.step("1"),
            Err(EnvCallError::Env {
                error: EnvError::NotReady(_),
                ..
            })
        ));
    }
}

#[test]
fn python_example_names_a_bad_config_field() {
    let plugin = load();
    match WasmEnv::new(&plugin, r#"{"colour": 3}"#, Grants::default()) {
        Err(EnvCallError::Env {
            error: EnvError::InvalidConfig(msg),
            ..
        }) => assert!(msg.contains("colour"), "{msg}"),
        Err(e) => panic!("expected invalid-config, got {e}"),
        Ok(_) => panic!("unknown field accepted"),
    }
}
