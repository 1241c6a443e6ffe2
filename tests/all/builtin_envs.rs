//! The built-in envs, from the registry (`ragen_gym_builtins::BUILTINS`): each one with a native
//! build passes `check_env` natively and through the sandbox, and its wasm32 build plays exactly
//! the same episodes as the native build (same seed, same levels and stochastic outcomes on both
//! targets). Every built-in names an unknown config field. (The WebShop bridge has no native
//! build; `tests/all/webshop.rs` runs it against a server.)

use ragen_gym_builtins::{BUILTINS, Builtin};
use ragen_gym_core::{Env, check_env};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv};

fn plugin(b: &Builtin) -> Plugin {
    let sandbox = Sandbox::new(SandboxConfig::default()).expect("sandbox");
    sandbox.load_bytes(b.name, b.wasm).expect("load built-in")
}

fn native(b: &Builtin, config: &str) -> Box<dyn Env> {
    let make = b.native.expect("a native build");
    make(config).unwrap_or_else(|e| panic!("{}: {e}", b.name))
}

/// Configs beyond the default (`""`) that exercise other code paths of one env.
const EXTRA_CONFIGS: &[(&str, &str)] = &[
    (
        "sokoban",
        r#"{"dim_x":8,"dim_y":8,"num_boxes":2,"search_depth":10}"#,
    ),
    ("sokoban", r#"{"search_depth":30,"grid_vocab":"alternate"}"#),
];

/// (built-in, config) for every built-in with a native build: the default config, then the
/// extra ones.
fn cases() -> Vec<(&'static Builtin, &'static str)> {
    let natives: Vec<&Builtin> = BUILTINS.iter().filter(|b| b.native.is_some()).collect();
    assert!(
        natives.len() >= 3,
        "bandit, sokoban and frozenlake are native"
    );
    let mut cases: Vec<_> = natives.iter().map(|b| (*b, "")).collect();
    for (name, config) in EXTRA_CONFIGS {
        let b = ragen_gym_builtins::find(name).expect("a built-in");
        cases.push((b, config));
    }
    cases
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

#[test]
fn builtins_pass_check_env_natively_and_sandboxed() {
    for (b, config) in cases() {
        let name = b.name;
        let report = check_env(|| Ok(native(b, config)));
        assert!(report.ok, "native {name} {config}: {:?}", report.failures);
        let plugin = plugin(b);
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
    for (b, config) in cases() {
        let name = b.name;
        let mut wasm = WasmEnv::new(&plugin(b), config, Grants::default()).expect("new env");
        assert_eq!(
            wasm.spec(),
            native(b, config).spec(),
            "{name} {config}: spec"
        );
        let expected = transcript(native(b, config).as_mut(), 40);
        let got = transcript(&mut wasm, 40);
        assert_eq!(got.len(), expected.len(), "{name} {config}");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g, e, "{name} {config}: wasm and native diverge");
        }
    }
}

#[test]
fn sandboxed_builtins_reject_unknown_config_fields_by_name() {
    for b in BUILTINS {
        let err = match WasmEnv::new(&plugin(b), r#"{"no_such_field": 1}"#, Grants::default()) {
            Ok(_) => panic!("{}: unknown config field accepted", b.name),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("no_such_field"), "{}: {err}", b.name);
    }
}

#[test]
fn every_preset_builds_a_valid_config_alone_and_on_the_cpu_profile() {
    use ragen_gym_starpo::{ConfigBuilder, EnvPreset, Profile};
    let with_preset: Vec<&Builtin> = BUILTINS.iter().filter(|b| b.preset.is_some()).collect();
    assert!(
        with_preset.len() >= 3,
        "bandit, sokoban and frozenlake have presets"
    );
    for b in with_preset {
        let preset = EnvPreset {
            name: b.name,
            toml: b.preset.expect("filtered"),
        };
        for profile in [Profile::Full, Profile::Cpu] {
            let c = ConfigBuilder::for_env(Some(preset), profile)
                .and_then(ConfigBuilder::build)
                .unwrap_or_else(|e| panic!("{} preset, {profile:?}: {e}", b.name));
            // constrained action decoding is on in every preset of an env with action names, on
            // every profile; Countdown's answers are free text
            assert_eq!(
                c.rollout.constrained_actions,
                b.name != "countdown",
                "{}",
                b.name
            );
            if profile == Profile::Cpu {
                // RAGEN's Bandit and Countdown are single-turn; the grid envs get two turns on
                // the CPU profile.
                let want_turns = if matches!(b.name, "bandit" | "countdown") {
                    1
                } else {
                    2
                };
                assert_eq!(c.agent_proxy.max_turn, want_turns, "{}", b.name);
                // the grid envs get RAGEN's whole 10-action budget in those two turns (the CPU
                // profile's 2 x 2 caps a perfect FrozenLake policy near random's rate)
                if matches!(b.name, "frozenlake" | "sokoban") {
                    let a = &c.agent_proxy;
                    assert_eq!(
                        (a.max_actions_per_turn, a.max_actions_per_traj),
                        (5, 10),
                        "{}",
                        b.name
                    );
                }
                // the CPU presets validate on at least 64 episodes (`configs/cpu.toml`)
                let val = c.es_manager.val.env_groups * c.es_manager.val.group_size;
                assert!(val >= 64, "{}: {val} validation episodes", b.name);
            } else {
                // the presets' [cpu] tables leave a GPU run at RAGEN's sizes
                assert_eq!(c.trainer.total_training_steps, 200, "{}", b.name);
                assert_eq!(c.es_manager.train.group_size, 16, "{}", b.name);
            }
        }
    }
}

#[test]
fn check_names_the_plugin_when_its_env_cannot_be_made() {
    // `check bandit --config '{bad'` printed ": checks failed" and ": 1 of 1 checks failed":
    // the env never started, so the report had no env id
    let out = std::process::Command::new(crate::child::cli())
        .args(["check", "bandit", "--config", "{bad"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("ragen/Bandit-v0: checks failed"),
        "{stdout}"
    );
    assert!(
        stderr.contains("ragen/Bandit-v0: 1 of 1 checks failed"),
        "{stderr}"
    );
}
