//! The built-in envs (Bandit, Sokoban, FrozenLake): each passes `check_env` natively and
//! through the sandbox, and the wasm32 build plays exactly the same episodes as the native
//! build (same seed, same levels and stochastic outcomes on both targets).

use ragen_bandit::Bandit;
use ragen_frozen_lake::FrozenLake;
use ragen_gym_core::{Env, NativeEnv, check_env};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv};
use ragen_sokoban::Sokoban;

fn plugin(name: &str) -> Plugin {
    let sandbox = Sandbox::new(SandboxConfig::default()).expect("sandbox");
    let bytes =
        ragen_gym_builtins::builtin(name).unwrap_or_else(|| panic!("built-in {name} missing"));
    sandbox.load_bytes(name, bytes).expect("load built-in")
}

fn native(name: &str, config: &str) -> Box<dyn Env> {
    let env: Result<Box<dyn Env>, _> = match name {
        "bandit" => NativeEnv::<Bandit>::new(config).map(|e| Box::new(e) as Box<dyn Env>),
        "sokoban" => NativeEnv::<Sokoban>::new(config).map(|e| Box::new(e) as Box<dyn Env>),
        "frozenlake" => NativeEnv::<FrozenLake>::new(config).map(|e| Box::new(e) as Box<dyn Env>),
        other => panic!("unknown built-in {other}"),
    };
    env.unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Play `episodes` seeds, cycling through the action names (plus one invalid action), and
/// record every observation, reward and flag.
fn transcript(env: &mut dyn Env, episodes: u64) -> Vec<String> {
    let mut names = env.spec().action_names.clone().expect("discrete actions");
    names.push("not-an-action".to_string());
    let mut out = Vec::new();
    for seed in 0..episodes {
        out.push(format!(
            "reset {seed}: {:?}",
            env.reset(seed).expect("reset")
        ));
        for i in 0..12usize {
            let action = &names[(i * 7 + seed as usize) % names.len()];
            match env.step(action) {
                Ok(r) => {
                    let done = r.terminated || r.truncated;
                    out.push(format!("{action}: {r:?}"));
                    if done {
                        break;
                    }
                }
                Err(e) => panic!("seed {seed} step {action}: {e}"),
            }
        }
    }
    out
}

const CASES: [(&str, &str); 5] = [
    ("bandit", ""),
    ("sokoban", ""),
    (
        "sokoban",
        r#"{"dim_x":8,"dim_y":8,"num_boxes":2,"search_depth":10}"#,
    ),
    ("sokoban", r#"{"search_depth":30,"grid_vocab":"alternate"}"#),
    ("frozenlake", ""),
];

#[test]
fn builtins_pass_check_env_natively_and_sandboxed() {
    for (name, config) in CASES {
        let report = check_env(|| Ok(native(name, config)));
        assert!(report.ok, "native {name} {config}: {:?}", report.failures);
        let plugin = plugin(name);
        let report = check_env(|| {
            WasmEnv::new(&plugin, config, Grants::default()).map(|e| Box::new(e) as Box<dyn Env>)
        });
        assert!(
            report.ok,
            "sandboxed {name} {config}: {:?}",
            report.failures
        );
    }
}

#[test]
fn wasm_and_native_builds_play_identical_episodes() {
    for (name, config) in CASES {
        let mut wasm = WasmEnv::new(&plugin(name), config, Grants::default()).expect("new env");
        assert_eq!(
            wasm.spec(),
            native(name, config).spec(),
            "{name} {config}: spec"
        );
        let expected = transcript(native(name, config).as_mut(), 40);
        let got = transcript(&mut wasm, 40);
        assert_eq!(got.len(), expected.len(), "{name} {config}");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g, e, "{name} {config}: wasm and native diverge");
        }
    }
}

#[test]
fn sandboxed_builtins_reject_unknown_config_fields_by_name() {
    for name in ["bandit", "sokoban", "frozenlake"] {
        let err = match WasmEnv::new(&plugin(name), r#"{"no_such_field": 1}"#, Grants::default()) {
            Ok(_) => panic!("{name}: unknown config field accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("no_such_field"), "{name}: {err}");
    }
}
