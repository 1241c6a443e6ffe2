//! The built-in Countdown (`plugins/countdown`, Python): RAGEN's rules and reward through the
//! sandbox. Every generated task is solvable (a search over + - * / finds a solution, which
//! scores 1); an answer with the right numbers and the wrong value scores RAGEN's format score
//! 0.1; an answer whose numbers differ from the task's scores 0; text that is not arithmetic is
//! an invalid action; every episode is one answer long.

use ragen_gym_core::{Env, EnvCallError, EnvError, check_env};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv};
use std::sync::OnceLock;

/// The built-in, loaded once (the 18 MB component is compiled once per test run).
fn plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            let b = ragen_gym_builtins::find("countdown").expect("countdown is built in");
            let sandbox = Sandbox::new(SandboxConfig::default()).expect("sandbox");
            sandbox.load_bytes(b.name, b.wasm).expect("load countdown")
        })
        .clone()
}

/// `Target: 24, nums: [3, 8, 1]` -> (24, [3, 8, 1]).
fn task(observation: &str) -> (i64, Vec<i64>) {
    let rest = observation.strip_prefix("Target: ").expect(observation);
    let (target, nums) = rest.split_once(", nums: [").expect(observation);
    let nums = nums.strip_suffix(']').expect(observation);
    (
        target.parse().expect(observation),
        nums.split(", ")
            .map(|n| n.parse().expect(observation))
            .collect(),
    )
}

/// A rational number as (numerator, denominator > 0).
type Q = (i64, i64);

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs().max(1)
    } else {
        gcd(b, a % b)
    }
}

fn apply(a: Q, op: char, b: Q) -> Option<Q> {
    let (n, d) = match op {
        '+' => (a.0 * b.1 + b.0 * a.1, a.1 * b.1),
        '-' => (a.0 * b.1 - b.0 * a.1, a.1 * b.1),
        '*' => (a.0 * b.0, a.1 * b.1),
        _ if b.0 == 0 => return None,
        _ => (a.0 * b.1, a.1 * b.0),
    };
    let g = gcd(n, d) * d.signum();
    Some((n / g, d / g))
}

/// An expression using every item exactly once that equals `target`, by exhaustive search.
fn solve(items: Vec<(Q, String)>, target: i64) -> Option<String> {
    if items.len() == 1 {
        return (items[0].0 == (target, 1)).then(|| items[0].1.clone());
    }
    for i in 0..items.len() {
        for j in 0..items.len() {
            if i == j {
                continue;
            }
            for op in ['+', '-', '*', '/'] {
                let Some(v) = apply(items[i].0, op, items[j].0) else {
                    continue;
                };
                let mut rest: Vec<_> = (0..items.len())
                    .filter(|&k| k != i && k != j)
                    .map(|k| items[k].clone())
                    .collect();
                rest.push((v, format!("({} {op} {})", items[i].1, items[j].1)));
                if let Some(e) = solve(rest, target) {
                    return Some(e);
                }
            }
        }
    }
    None
}

#[test]
fn countdown_passes_check_env() {
    let plugin = plugin();
    let report = check_env(|| {
        WasmEnv::new(&plugin, "", Grants::default()).map(|e| Box::new(e) as Box<dyn Env>)
    });
    assert!(report.ok, "{:?}", report.failures);
    assert_eq!(report.env_id, "ragen/Countdown-v0");
}

#[test]
fn countdown_scores_answers_as_ragen_does() {
    let mut env = WasmEnv::new(&plugin(), "", Grants::default()).expect("new env");
    assert_eq!(env.spec().max_episode_steps, 1);
    assert_eq!(env.spec().action_names, None);
    let mut sizes = [0usize; 5];
    for seed in 0..24u64 {
        let (target, nums) = task(&env.reset(seed).expect("reset").observation);
        assert!((1..=100).contains(&target) && nums.iter().all(|n| (1..=99).contains(n)));
        sizes[nums.len()] += 1;
        let items = nums.iter().map(|&n| ((n, 1), n.to_string())).collect();
        let solution = solve(items, target).unwrap_or_else(|| panic!("seed {seed}: no solution"));
        let r = env.step(&solution).expect("step");
        assert_eq!(
            r.observation, "Your answer get 1.0 points.",
            "seed {seed}: {solution}"
        );
        assert!(r.reward == 1.0 && r.success && r.terminated && r.action_is_valid);
        assert!(matches!(
            env.step("1"),
            Err(EnvCallError::Env {
                error: EnvError::NotReady(_),
                ..
            })
        ));

        // The right numbers with the wrong value: the format score. (With positive numbers the
        // difference is below the sum, so one of the two misses the target.)
        let sum: i64 = nums.iter().sum();
        let sep = if sum == target { " - " } else { " + " };
        let wrong = nums
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(sep);
        env.reset(seed).expect("reset");
        let r = env.step(&wrong).expect("step");
        assert_eq!(
            (r.reward, r.observation.as_str()),
            (0.1, "Your answer get 0.1 points."),
            "{wrong}"
        );
        assert!(!r.success && r.terminated && r.action_is_valid);

        // A number missing: 0.
        env.reset(seed).expect("reset");
        let r = env
            .step(
                &nums[1..]
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(" * "),
            )
            .expect("step");
        assert_eq!(
            (r.reward, r.observation.as_str()),
            (0.0, "Your answer get 0 points.")
        );
        assert!(r.action_is_valid && r.terminated && !r.success);

        // Not arithmetic: an invalid action that still ends the episode, scoring 0.
        env.reset(seed).expect("reset");
        let r = env.step("I give up").expect("step");
        assert!(!r.action_is_valid && r.reward == 0.0 && r.terminated);
    }
    assert!(sizes[3] > 0 && sizes[4] > 0, "3 and 4 numbers: {sizes:?}");
}

#[test]
fn countdown_rejects_bad_configs_by_field() {
    for (config, field) in [
        (r#"{"max_numbers": 9}"#, "max_numbers"),
        (r#"{"score": "high"}"#, "score"),
        (r#"{"colour": 1}"#, "colour"),
    ] {
        match WasmEnv::new(&plugin(), config, Grants::default()) {
            Err(EnvCallError::Env {
                error: EnvError::InvalidConfig(m),
                ..
            }) => {
                assert!(m.contains(field), "{config}: {m}");
            }
            Err(e) => panic!("{config}: expected invalid-config, got {e}"),
            Ok(_) => panic!("{config} accepted"),
        }
    }
    // A config with 2 numbers and targets up to 10 gives tasks of that shape.
    let mut env = WasmEnv::new(
        &plugin(),
        r#"{"min_numbers": 2, "max_numbers": 2, "max_target": 10}"#,
        Grants::default(),
    )
    .expect("new env");
    let (target, nums) = task(&env.reset(5).expect("reset").observation);
    assert!(
        nums.len() == 2 && (1..=10).contains(&target),
        "{target} {nums:?}"
    );
}
