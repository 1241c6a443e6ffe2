//! `check_env`: a conformance checker in the spirit of Gymnasium's `check_env`
//! (`gymnasium.utils.env_checker`): spec sanity, reset determinism
//! (`check_reset_seed_determinism`), step determinism (a seeded random action log replayed
//! twice on fresh envs), and limits (episodes end within `max_episode_steps` without plugin
//! errors; rewards finite), and for an env with an expert, the expert's claims
//! ([`crate::check_expert`]).

use crate::env::{Env, EnvCallError};
use crate::rng::splitmix64;
use ragen_gym_sdk::{ResetResult, StepResult};
use serde::Serialize;

/// Result of [`check_env`].
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Env id (from its spec), if one could be built.
    pub env_id: String,
    /// True when every check passed.
    pub ok: bool,
    /// Names of the checks that passed.
    pub passed: Vec<String>,
    /// One line per failed check: `check: what went wrong`.
    pub failures: Vec<String>,
}

impl CheckReport {
    /// A report with no checks run yet.
    pub(crate) fn start() -> Self {
        Self {
            env_id: String::new(),
            ok: false,
            passed: vec![],
            failures: vec![],
        }
    }

    /// Record the outcome of the check `name`.
    pub(crate) fn record(&mut self, name: &str, r: Result<(), String>) {
        match r {
            Ok(()) => self.passed.push(name.to_string()),
            Err(e) => self.failures.push(format!("{name}: {e}")),
        }
    }
}

/// Seeds used by the checks.
const SEEDS: [u64; 3] = [0, 1, 12345];

/// Step outcome without float noise: what must be identical on replay.
fn fingerprint(r: &StepResult) -> String {
    format!(
        "{}|{}|{}|{}|{}|{}|{}|{:?}",
        r.observation,
        r.reward.to_bits(),
        r.terminated,
        r.truncated,
        r.action_is_valid,
        r.action_is_effective,
        r.success,
        r.info
            .iter()
            .map(|m| (&m.name, m.value.to_bits()))
            .collect::<Vec<_>>()
    )
}

/// Free-text probes for envs without discrete action names.
const TEXT_ACTIONS: [&str; 4] = ["search[shoes]", "click[item 1]", "help", ""];

/// `max_episode_steps` (at least 1) actions drawn from `rng_seed`: action names, or free-text
/// probes for an env without them.
fn random_actions(spec: &ragen_gym_sdk::EnvSpec, rng_seed: u64) -> Vec<String> {
    let mut rng = rng_seed;
    (0..spec.max_episode_steps.max(1))
        .map(|_| match &spec.action_names {
            Some(names) if !names.is_empty() => {
                names[(splitmix64(&mut rng) % names.len() as u64) as usize].clone()
            }
            _ => TEXT_ACTIONS[(splitmix64(&mut rng) % TEXT_ACTIONS.len() as u64) as usize]
                .to_string(),
        })
        .collect()
}

/// Run one episode with actions drawn from `rng_seed`; returns the reset observation and the
/// step fingerprints, or the first error.
fn episode(env: &mut dyn Env, seed: u64, rng_seed: u64) -> Result<(String, Vec<String>), String> {
    let spec = env.spec().clone();
    let first: ResetResult = env.reset(seed).map_err(|e| e.to_string())?;
    let mut log = Vec::new();
    for action in random_actions(&spec, rng_seed) {
        let r = env
            .step(&action)
            .map_err(|e| format!("step({action:?}): {e}"))?;
        if !r.reward.is_finite() {
            return Err(format!("step({action:?}) returned reward {}", r.reward));
        }
        let done = r.terminated || r.truncated;
        log.push(fingerprint(&r));
        if done {
            break;
        }
    }
    Ok((first.observation, log))
}

/// Check an env built by `make` (called several times: each check uses fresh envs).
pub fn check_env(mut make: impl FnMut() -> Result<Box<dyn Env>, EnvCallError>) -> CheckReport {
    let mut report = CheckReport::start();
    let mut env = match make() {
        Ok(e) => e,
        Err(e) => {
            report.failures.push(format!("create: {e}"));
            return report;
        }
    };
    report.env_id = env.spec().id.clone();
    report.record("spec", check_spec(env.as_ref()));

    report.record(
        "reset_determinism",
        reset_determinism(env.as_mut(), &mut make),
    );
    report.record("step_determinism", step_determinism(&mut make));
    report.record("limits", limits(env.as_mut()));
    report.record("fork", fork_check(env.as_mut(), &mut make));
    if let Some(r) = crate::check_expert::check_expert(env.as_mut()) {
        report.record("expert", r);
    }
    report.ok = report.failures.is_empty();
    report
}

/// What builds a fresh env for a check.
type MakeEnv<'a> = dyn FnMut() -> Result<Box<dyn Env>, EnvCallError> + 'a;

/// Reset determinism: the same seed twice on one env, and on a second fresh env.
fn reset_determinism(env: &mut dyn Env, make: &mut MakeEnv<'_>) -> Result<(), String> {
    let mut other = make().map_err(|e| e.to_string())?;
    for seed in SEEDS {
        let a = env.reset(seed).map_err(|e| e.to_string())?.observation;
        let b = env.reset(seed).map_err(|e| e.to_string())?.observation;
        let c = other.reset(seed).map_err(|e| e.to_string())?.observation;
        if a != b {
            return Err(format!(
                "reset({seed}) twice on one env gave different observations"
            ));
        }
        if a != c {
            return Err(format!(
                "reset({seed}) on two envs gave different observations"
            ));
        }
        if a.is_empty() {
            return Err(format!("reset({seed}) returned an empty observation"));
        }
    }
    Ok(())
}

/// Step determinism: a seeded random action log replayed on two fresh envs.
fn step_determinism(make: &mut MakeEnv<'_>) -> Result<(), String> {
    for (i, seed) in SEEDS.iter().enumerate() {
        let mut a = make().map_err(|e| e.to_string())?;
        let mut b = make().map_err(|e| e.to_string())?;
        let ra = episode(a.as_mut(), *seed, 1000 + i as u64)?;
        let rb = episode(b.as_mut(), *seed, 1000 + i as u64)?;
        if ra != rb {
            let at =
                ra.1.iter()
                    .zip(&rb.1)
                    .position(|(x, y)| x != y)
                    .unwrap_or(ra.1.len().min(rb.1.len()));
            return Err(format!(
                "seed {seed}: replaying the same actions diverged at step {at}"
            ));
        }
    }
    Ok(())
}

/// Exact forks ([`crate::fork`]): an episode of seeded random actions recorded on a fresh env is
/// rebuilt at its middle and its last step on `env`, an instance that has already run other
/// episodes, checked step by step. Catches state a reset does not clear (the step determinism
/// check runs each episode on a fresh instance).
fn fork_check(env: &mut dyn Env, make: &mut MakeEnv<'_>) -> Result<(), String> {
    for (i, seed) in SEEDS.iter().enumerate() {
        let mut fresh = make().map_err(|e| e.to_string())?;
        let actions = random_actions(fresh.spec(), 2000 + i as u64);
        let t = crate::fork::record_actions(fresh.as_mut(), *seed, &actions)
            .map_err(|e| format!("seed {seed}: recording: {e}"))?;
        let n = t.num_actions;
        for k in [n / 2, n] {
            crate::fork::fork_in_place(env, &t, k).map_err(|e| format!("seed {seed}: {e}"))?;
        }
    }
    Ok(())
}

/// Limits: episodes end (terminated/truncated) or reach max_episode_steps without errors; a step
/// after the end is an env error or a handled no-op, never a plugin failure.
fn limits(env: &mut dyn Env) -> Result<(), String> {
    for seed in 0..8u64 {
        let (_, log) = episode(env, seed, 77 + seed)?;
        let max = env.spec().max_episode_steps as usize;
        if log.len() > max {
            return Err(format!(
                "seed {seed}: ran {} steps, over max_episode_steps {max}",
                log.len()
            ));
        }
    }
    env.reset(3).map_err(|e| e.to_string())?;
    match env.step("definitely-not-an-action") {
        Ok(r) if r.action_is_valid => Err("an unknown action was reported as valid".into()),
        Ok(_) | Err(EnvCallError::Env { .. }) => Ok(()),
        Err(e @ (EnvCallError::Plugin(_) | EnvCallError::NoExpert { .. })) => {
            Err(format!("an unknown action crashed the plugin: {e}"))
        }
    }
}

fn check_spec(env: &dyn Env) -> Result<(), String> {
    let s = env.spec();
    crate::check_id(&s.id).map_err(|e| format!("id {e}"))?;
    let versioned = s.id.rsplit_once("-v").is_some_and(|(n, v)| {
        !n.ends_with('/') && !v.is_empty() && v.chars().all(|c| c.is_ascii_digit())
    });
    if !versioned {
        return Err(format!("id {:?} has no `-vN` version suffix", s.id));
    }
    semver::Version::parse(&s.version)
        .map_err(|e| format!("version {:?} is not semver: {e}", s.version))?;
    if s.instruction.trim().is_empty() {
        return Err("instruction is empty".into());
    }
    if s.max_episode_steps == 0 {
        return Err("max_episode_steps is 0".into());
    }
    if let Some(names) = &s.action_names {
        if names.is_empty() {
            return Err("action_names is an empty list (use none for free-text actions)".into());
        }
        let mut lower: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
        lower.sort();
        lower.dedup();
        if lower.len() != names.len() {
            return Err("action_names are not unique case-insensitively".into());
        }
    }
    if !s.default_config.trim().is_empty() {
        let v: serde_json::Value = serde_json::from_str(&s.default_config)
            .map_err(|e| format!("default_config is not JSON: {e}"))?;
        if !v.is_object() {
            return Err("default_config is not a JSON object".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::NativeEnv;
    use ragen_gym_sdk::{EnvError, EnvSpec, Environment};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Walk right to 3 (reward 1, success); `Left` is a no-op. With `leaky`, the first
    /// observation counts resets across every instance, which breaks reset determinism; with
    /// `step-leak`, step observations count the instance's steps across resets.
    struct Walk {
        at: u32,
        leaky: bool,
        step_leak: bool,
        lifetime_steps: u64,
    }

    static RESETS: AtomicU64 = AtomicU64::new(0);

    impl Environment for Walk {
        const ID: &'static str = "test/Walk-v0";
        /// `"leaky"` or `"step-leak"` (plain text) selects a leaky variant.
        type Config = String;
        fn spec(_config: &String) -> EnvSpec {
            EnvSpec::new("Go right three times.")
                .actions(["Left", "Right"])
                .max_steps(8)
                .reward_threshold(1.0)
        }
        fn new(config: String) -> Result<Self, EnvError> {
            Ok(Self {
                at: 0,
                leaky: config == "leaky",
                step_leak: config == "step-leak",
                lifetime_steps: 0,
            })
        }
        fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
            self.at = 0;
            let n = RESETS.fetch_add(1, Ordering::Relaxed);
            let observation = if self.leaky {
                format!("reset number {n}")
            } else {
                format!("at 0 (seed {seed})")
            };
            Ok(ResetResult {
                observation,
                info: vec![],
            })
        }
        fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
            let valid = action == "Left" || action == "Right";
            if action == "Right" {
                self.at += 1;
            }
            let done = self.at >= 3;
            self.lifetime_steps += 1;
            let observation = if self.step_leak {
                format!(
                    "at {} (step {} of this instance)",
                    self.at, self.lifetime_steps
                )
            } else {
                format!("at {}", self.at)
            };
            if !valid {
                return Ok(StepResult::invalid(observation));
            }
            Ok(StepResult::new(observation)
                .reward(if done { 1.0 } else { 0.0 })
                .terminated(done)
                .effective(action == "Right")
                .success(done))
        }
    }

    ragen_gym_sdk::export_env!(Walk);

    fn make(config: &'static str) -> impl FnMut() -> Result<Box<dyn Env>, EnvCallError> {
        move || Ok(Box::new(NativeEnv::<Walk>::new(config)?) as Box<dyn Env>)
    }

    #[test]
    fn a_deterministic_env_passes_every_check() {
        let report = check_env(make(""));
        assert!(report.ok, "{:?}", report.failures);
        assert_eq!(report.env_id, "test/Walk-v0");
        assert_eq!(
            report.passed,
            [
                "spec",
                "reset_determinism",
                "step_determinism",
                "limits",
                "fork"
            ]
        );
    }

    #[test]
    fn state_kept_across_resets_fails_only_the_fork_check() {
        // Each episode on a fresh instance repeats exactly, so only a fork on a used instance
        // sees the step counter that the reset left alone.
        let report = check_env(make("step-leak"));
        assert_eq!(
            report.passed,
            ["spec", "reset_determinism", "step_determinism", "limits"]
        );
        assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
        let f = &report.failures[0];
        assert!(
            f.starts_with("fork: seed 0: test/Walk-v0 is not deterministic: fork at step ")
                && f.contains("step 0 (action ")
                && f.contains(": observation recorded \"at "),
            "{f}"
        );
    }

    #[test]
    fn state_shared_across_resets_fails_reset_determinism() {
        let report = check_env(make("leaky"));
        assert!(!report.ok);
        assert_eq!(report.passed, ["spec", "limits"], "{:?}", report.failures);
        assert!(
            report.failures[0].starts_with("reset_determinism: reset(0) twice on one env"),
            "{:?}",
            report.failures
        );
    }
}
