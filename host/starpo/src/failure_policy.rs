//! What a failing env plugin does to a training run (`[failure]` in `configs/default.toml`): the
//! trajectories a plugin failure ended, the checks that stop a run (`fail_fast`, or more than
//! `max_failure_rate` of a rollout failed), the groups the update must leave out (failed ones,
//! and those with a non-finite score or a trajectory without a turn), and the `sandbox/*`
//! counters of it all.

use crate::config::{FailureConfig, FailurePolicy};
use crate::metrics::Metrics;
use ragen_gym_core::{EpisodeFailure, Trajectory};
use std::collections::BTreeSet;

/// Why the failure policy stopped a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FailureError {
    /// `failure.policy = "fail_fast"` and a training trajectory failed.
    #[error(
        "env plugin {env_id} failed in iteration {iteration} (failure.policy = \"fail_fast\"): \
         group {group}, seed {seed}: {reason}"
    )]
    FailFast {
        /// The env's id.
        env_id: String,
        /// The iteration.
        iteration: u32,
        /// The failed trajectory's group.
        group: usize,
        /// Its reset seed.
        seed: u64,
        /// Its end reason.
        reason: String,
    },
    /// More than `failure.max_failure_rate` of one rollout's trajectories failed.
    #[error(
        "env plugin {env_id} failed {failed} of {total} training trajectories in iteration \
         {iteration}, more than failure.max_failure_rate = {max_rate}; the first (group {group}, \
         seed {seed}): {reason}"
    )]
    TooMany {
        /// The env's id.
        env_id: String,
        /// The iteration.
        iteration: u32,
        /// Failed trajectories.
        failed: usize,
        /// Trajectories of the rollout.
        total: usize,
        /// `failure.max_failure_rate`.
        max_rate: f64,
        /// The first failed trajectory's group.
        group: usize,
        /// Its reset seed.
        seed: u64,
        /// Its end reason.
        reason: String,
    },
}

/// The counters of one iteration's failures, reported as `sandbox/traps`, `sandbox/timeouts`,
/// `sandbox/retries` and `sandbox/dropped_groups`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureTally {
    /// Trajectories ended by a trap or an env error (every attempt).
    pub traps: usize,
    /// Trajectories ended by a call's deadline or the wall budget (every attempt).
    pub timeouts: usize,
    /// Groups rolled out again.
    pub retries: usize,
    /// Groups left out of the update because a trajectory failed.
    pub dropped_groups: usize,
}

impl FailureTally {
    /// Count the failed trajectories of one attempt.
    pub fn count(&mut self, trajs: &[Trajectory]) {
        for t in trajs {
            match t.failure {
                Some(EpisodeFailure::Trap) => self.traps += 1,
                Some(EpisodeFailure::Timeout) => self.timeouts += 1,
                None => {}
            }
        }
    }

    /// The counters as metrics.
    pub fn metrics(&self) -> Metrics {
        [
            ("traps", self.traps),
            ("timeouts", self.timeouts),
            ("retries", self.retries),
            ("dropped_groups", self.dropped_groups),
        ]
        .into_iter()
        .map(|(k, v)| (format!("sandbox/{k}"), v as f64))
        .collect()
    }
}

/// The groups with a failed trajectory, in order.
pub fn failed_groups(trajs: &[Trajectory]) -> BTreeSet<usize> {
    trajs
        .iter()
        .filter(|t| t.failure.is_some())
        .map(|t| t.group)
        .collect()
}

/// Stop the run when the policy says so: any failure under `fail_fast`, or more than
/// `max_failure_rate` of the rollout's trajectories failed.
pub fn check(
    cfg: &FailureConfig,
    trajs: &[Trajectory],
    env_id: &str,
    iteration: u32,
) -> Result<(), FailureError> {
    let failed: Vec<&Trajectory> = trajs.iter().filter(|t| t.failure.is_some()).collect();
    let Some(first) = failed.first() else {
        return Ok(());
    };
    let reason = first.end_reason.clone().unwrap_or_default();
    if cfg.policy == FailurePolicy::FailFast {
        return Err(FailureError::FailFast {
            env_id: env_id.into(),
            iteration,
            group: first.group,
            seed: first.seed,
            reason,
        });
    }
    if failed.len() as f64 > cfg.max_failure_rate * trajs.len() as f64 {
        return Err(FailureError::TooMany {
            env_id: env_id.into(),
            iteration,
            failed: failed.len(),
            total: trajs.len(),
            max_rate: cfg.max_failure_rate,
            group: first.group,
            seed: first.seed,
            reason,
        });
    }
    Ok(())
}

/// Rolls out again the trajectories at the given indices (whole groups), for the given attempt.
pub type RollAgain<'a, E> = dyn FnMut(&[usize], u32) -> Result<Vec<Trajectory>, E> + 'a;

/// Apply the policy to a training rollout's trajectories (laid out group after group): stop the
/// run when [`check`] says so; under `retry`, roll each group with a failed trajectory out again
/// with `again(indices of its members, attempt)`, up to `max_retries` times, and put the new
/// trajectories in their place. Returns the groups still failed (dropped from the update) and
/// the counters.
pub fn enforce<E: From<FailureError>>(
    cfg: &FailureConfig,
    trajs: &mut [Trajectory],
    env_id: &str,
    iteration: u32,
    again: &mut RollAgain<'_, E>,
) -> Result<(BTreeSet<usize>, FailureTally), E> {
    let mut tally = FailureTally::default();
    tally.count(trajs);
    check(cfg, trajs, env_id, iteration)?;
    let mut failed = failed_groups(trajs);
    if cfg.policy == FailurePolicy::Retry {
        for attempt in 1..=cfg.max_retries {
            if failed.is_empty() {
                break;
            }
            let members: Vec<usize> = (0..trajs.len())
                .filter(|&i| failed.contains(&trajs[i].group))
                .collect();
            let redone = again(&members, attempt)?;
            tally.count(&redone);
            tally.retries += failed.len();
            for (i, t) in members.into_iter().zip(redone) {
                trajs[i] = t;
            }
            failed = failed_groups(trajs);
        }
    }
    tally.dropped_groups = failed.len();
    Ok((failed, tally))
}

/// The groups the update leaves out: `dropped` (failed), those with a non-finite raw score and
/// those with a trajectory without a turn (nothing to train on, and a score of 0 that no answer
/// earned, which would skew the group's baseline and std); with `rollout/nonfinite_scores` and
/// `rollout/zero_turn_trajectories` (trajectories) and `rollout/excluded_groups` in `m`.
pub fn excluded_groups(
    trajs: &[Trajectory],
    raw_scores: &[f64],
    dropped: &BTreeSet<usize>,
    m: &mut Metrics,
) -> BTreeSet<usize> {
    let mut out = dropped.clone();
    let (mut nonfinite, mut zero_turn) = (0usize, 0usize);
    for (t, s) in trajs.iter().zip(raw_scores) {
        if !s.is_finite() {
            nonfinite += 1;
            out.insert(t.group);
        }
        if t.turns.is_empty() {
            zero_turn += 1;
            out.insert(t.group);
        }
    }
    m.insert("rollout/nonfinite_scores".into(), nonfinite as f64);
    m.insert("rollout/zero_turn_trajectories".into(), zero_turn as f64);
    m.insert("rollout/excluded_groups".into(), out.len() as f64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::trajectory;

    fn failed(group: usize, seed: u64, f: EpisodeFailure) -> Trajectory {
        let mut t = trajectory(group, seed, 1);
        t.failure = Some(f);
        t.end_reason = Some(format!("step failed: {f:?}"));
        t
    }

    fn cfg(policy: FailurePolicy, max_failure_rate: f64) -> FailureConfig {
        FailureConfig {
            policy,
            max_retries: 2,
            max_failure_rate,
            trajectory_wall_s: 0.0,
        }
    }

    #[test]
    fn a_rare_failure_passes_a_frequent_one_stops_and_fail_fast_stops_at_the_first() {
        // 8 trajectories, one trap: 1/8 is under the default rate of 0.5
        let mut trajs: Vec<Trajectory> = (0..8).map(|i| trajectory(i / 2, 100, 1)).collect();
        trajs[3] = failed(1, 100, EpisodeFailure::Trap);
        let drop = cfg(FailurePolicy::DropGroup, 0.5);
        assert_eq!(check(&drop, &trajs, "t/X-v0", 4), Ok(()));
        assert_eq!(failed_groups(&trajs), BTreeSet::from([1]));
        let e = check(&cfg(FailurePolicy::FailFast, 0.5), &trajs, "t/X-v0", 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "env plugin t/X-v0 failed in iteration 4 (failure.policy = \"fail_fast\"): group 1, \
             seed 100: step failed: Trap"
        );
        // 5 of 8 is more than half; exactly half is not
        for i in [0, 2, 4] {
            trajs[i] = failed(i / 2, 100, EpisodeFailure::Timeout);
        }
        assert_eq!(check(&drop, &trajs, "t/X-v0", 4), Ok(()));
        trajs[6] = failed(3, 100, EpisodeFailure::Trap);
        let e = check(&drop, &trajs, "t/X-v0", 4).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "env plugin t/X-v0 failed 5 of 8 training trajectories in iteration 4, more \
                 than failure.max_failure_rate = 0.5; the first (group 0, seed 100): step failed: \
                 Timeout"
            ),
            "{e}"
        );
        // 1 never stops a run
        assert_eq!(
            check(&cfg(FailurePolicy::Retry, 1.0), &trajs, "x", 4),
            Ok(())
        );
        let mut tally = FailureTally::default();
        tally.count(&trajs);
        assert_eq!((tally.traps, tally.timeouts), (2, 3));
        assert_eq!(tally.metrics()["sandbox/timeouts"], 3.0);
        assert_eq!(tally.metrics()["sandbox/dropped_groups"], 0.0);
    }

    /// The trajectories, the dropped groups, the counters and the re-rollouts asked for.
    type RetryRun = (
        Vec<Trajectory>,
        BTreeSet<usize>,
        FailureTally,
        Vec<(Vec<usize>, u32)>,
    );

    /// 4 groups of 2 over the Counter env; the trajectories of seed 99 (group 1) trap while
    /// `fails_left` says so.
    fn retry_run(cfg: &FailureConfig, fails_left: u32) -> RetryRun {
        let outcome = |group: usize, trapped: bool| {
            if trapped {
                failed(group, 99, EpisodeFailure::Trap)
            } else {
                trajectory(group, 100 + group as u64, 2)
            }
        };
        let mut trajs: Vec<Trajectory> = (0..8).map(|i| outcome(i / 2, i / 2 == 1)).collect();
        let mut calls = Vec::new();
        let mut left = fails_left;
        let mut again = |idx: &[usize], attempt: u32| -> Result<Vec<Trajectory>, FailureError> {
            calls.push((idx.to_vec(), attempt));
            let trapped = left > 0;
            left = left.saturating_sub(1);
            Ok(idx.iter().map(|&i| outcome(i / 2, trapped)).collect())
        };
        let (dropped, tally) = enforce(cfg, &mut trajs, "t/X-v0", 1, &mut again).unwrap();
        (trajs, dropped, tally, calls)
    }

    #[test]
    fn retry_rolls_the_failed_group_again_until_it_passes_or_the_retries_run_out() {
        let retry = cfg(FailurePolicy::Retry, 0.5);
        // fails once more, then passes: one retry of group 1 fails, the second succeeds
        let (trajs, dropped, tally, calls) = retry_run(&retry, 1);
        assert_eq!(calls, vec![(vec![2, 3], 1), (vec![2, 3], 2)]);
        assert!(dropped.is_empty());
        assert!(trajs.iter().all(|t| t.failure.is_none()));
        assert_eq!(trajs[2].turns.len(), 2);
        assert_eq!(
            tally,
            FailureTally {
                traps: 4,
                timeouts: 0,
                retries: 2,
                dropped_groups: 0
            }
        );
        // fails on every attempt: max_retries = 2 re-rollouts, then the group is dropped
        let (_, dropped, tally, calls) = retry_run(&retry, u32::MAX);
        assert_eq!(calls.len(), 2);
        assert_eq!(dropped, BTreeSet::from([1]));
        assert_eq!(
            (tally.traps, tally.retries, tally.dropped_groups),
            (6, 2, 1)
        );
        // drop_group never rolls out again
        let (trajs, dropped, tally, calls) = retry_run(&cfg(FailurePolicy::DropGroup, 0.5), 0);
        assert!(calls.is_empty());
        assert_eq!(dropped, BTreeSet::from([1]));
        assert_eq!(trajs[2].failure, Some(EpisodeFailure::Trap));
        assert_eq!(tally.metrics()["sandbox/dropped_groups"], 1.0);
        assert_eq!(tally.metrics()["sandbox/traps"], 2.0);
    }

    #[test]
    fn non_finite_scores_and_zero_turn_trajectories_exclude_their_groups() {
        let mut trajs: Vec<Trajectory> = (0..8).map(|i| trajectory(i / 2, 7, 1)).collect();
        trajs[5].turns.clear();
        let raw = [0.0, 1.0, f64::NAN, 0.5, 1.0, 0.0, f64::INFINITY, 1.0];
        let mut m = Metrics::new();
        let out = excluded_groups(&trajs, &raw, &BTreeSet::from([0]), &mut m);
        assert_eq!(out, BTreeSet::from([0, 1, 2, 3]));
        assert_eq!(m["rollout/nonfinite_scores"], 2.0);
        assert_eq!(m["rollout/zero_turn_trajectories"], 1.0);
        assert_eq!(m["rollout/excluded_groups"], 4.0);
    }
}
