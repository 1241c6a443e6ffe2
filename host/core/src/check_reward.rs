//! `check_reward`: the conformance checker for reward-function plugins, the counterpart of
//! [`crate::check_env`]. A reward function must score (or refuse, with a message) every
//! trajectory without failing, give finite totals, and be a pure function of the trajectory: the
//! same trajectory scores the same on a fresh instance and when scored again.

use crate::check::CheckReport;
use crate::reward::{RewardError, RewardFunction};
use crate::trajectory::{Trajectory, Turn};
use ragen_gym_sdk::{Metric, RewardBreakdown};

/// Probe trajectories: no turns; one parsed, successful turn; two turns, one unparsed and long.
fn probes() -> Vec<Trajectory> {
    let turn = |response: &str, answer: Option<&str>, reward: f64| Turn {
        observation: "Target: 24, nums: [3, 8, 1]".into(),
        actions_left: 1,
        response: response.into(),
        think: None,
        answer: answer.map(str::to_string),
        actions: answer.map(|a| vec![a.to_string()]).unwrap_or_default(),
        env_reward: reward,
        action_is_valid: answer.is_some(),
        action_is_effective: answer.is_some(),
        format_penalty: answer.is_none(),
        info: vec![Metric::new("steps", 1.0)],
        steps: Vec::new(),
        sampled: None,
    };
    let trajectory = |seed: u64, turns: Vec<Turn>, success: bool| Trajectory {
        env_id: "check/Probe-v0".into(),
        tag: "check".into(),
        group: 0,
        seed,
        final_observation: String::new(),
        num_actions: turns.iter().map(|t| t.actions.len()).sum(),
        turns,
        terminated: true,
        truncated: !success,
        success,
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    };
    vec![
        trajectory(0, vec![], false),
        trajectory(
            1,
            vec![turn("<answer>3 * 8 * 1</answer>", Some("3 * 8 * 1"), 1.0)],
            true,
        ),
        trajectory(
            12345,
            vec![
                turn(&"I am not sure. ".repeat(40), None, 0.0),
                turn("<answer>Up</answer>", Some("Up"), 0.1),
            ],
            false,
        ),
    ]
}

/// A score without float noise, or the refusal: what must repeat exactly.
fn fingerprint(r: &Result<RewardBreakdown, RewardError>) -> Result<String, String> {
    match r {
        Ok(b) => Ok(format!(
            "{}|{:?}",
            b.total.to_bits(),
            b.components
                .iter()
                .map(|m| (&m.name, m.value.to_bits()))
                .collect::<Vec<_>>()
        )),
        Err(RewardError::Refused { message }) => Ok(format!("refused: {message}")),
        Err(e @ RewardError::Plugin(_)) => Err(e.to_string()),
    }
}

/// Check a reward function built by `make` (called for each fresh instance the checks need).
pub fn check_reward(
    mut make: impl FnMut() -> Result<Box<dyn RewardFunction>, String>,
) -> CheckReport {
    let mut report = CheckReport::start();
    let mut first = match make() {
        Ok(f) => f,
        Err(e) => {
            report.failures.push(format!("create: {e}"));
            return report;
        }
    };
    report.env_id = first.name().to_string();
    let probes = probes();
    let scores: Vec<_> = probes.iter().map(|t| first.score(t)).collect();
    let score = (|| -> Result<(), String> {
        for (t, r) in probes.iter().zip(&scores) {
            fingerprint(r).map_err(|e| format!("seed {}: {e}", t.seed))?;
            if let Ok(b) = r
                && !b.total.is_finite()
            {
                return Err(format!("seed {}: total {}", t.seed, b.total));
            }
        }
        Ok(())
    })();
    report.record("score", score);
    let determinism = (|| -> Result<(), String> {
        let mut fresh = make()?;
        for (t, r) in probes.iter().zip(&scores) {
            let want = fingerprint(r);
            if fingerprint(&first.score(t)) != want {
                return Err(format!(
                    "seed {}: scoring again on one instance gave another result",
                    t.seed
                ));
            }
            if fingerprint(&fresh.score(t)) != want {
                return Err(format!(
                    "seed {}: a fresh instance gave another result",
                    t.seed
                ));
            }
        }
        Ok(())
    })();
    report.record("score_determinism", determinism);
    report.ok = report.failures.is_empty();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Scores the response length; with `leaky`, adds how many scores any instance gave before.
    struct Length {
        leaky: bool,
    }

    static CALLS: AtomicU64 = AtomicU64::new(0);

    impl RewardFunction for Length {
        fn name(&self) -> &str {
            "test/Length-v0"
        }
        fn score(&mut self, t: &Trajectory) -> Result<RewardBreakdown, RewardError> {
            let n = CALLS.fetch_add(1, Ordering::Relaxed);
            if t.turns.is_empty() {
                return Err(RewardError::Refused {
                    message: "no turns".into(),
                });
            }
            let len: usize = t.turns.iter().map(|u| u.response.len()).sum();
            let extra = if self.leaky { n as f64 } else { 0.0 };
            Ok(RewardBreakdown::from_components([(
                "length",
                -0.001 * len as f64 + extra,
            )]))
        }
    }

    #[test]
    fn a_pure_function_passes_and_a_stateful_one_fails() {
        let ok = check_reward(|| Ok(Box::new(Length { leaky: false })));
        assert!(ok.ok, "{:?}", ok.failures);
        assert_eq!(ok.env_id, "test/Length-v0");
        assert_eq!(ok.passed, ["score", "score_determinism"]);
        let leaky = check_reward(|| Ok(Box::new(Length { leaky: true })));
        assert!(!leaky.ok);
        assert!(
            leaky.failures[0].starts_with("score_determinism"),
            "{:?}",
            leaky.failures
        );
        let broken = check_reward(|| Err("no instance".to_string()));
        assert_eq!(broken.failures, ["create: no instance"]);
    }
}
