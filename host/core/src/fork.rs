//! Exact env forks: rebuild the state a recorded [`Trajectory`] reached after its first `step`
//! env steps by replay, `reset(recorded seed)` and then the recorded actions, checking every
//! result against the record. A plugin is deterministic given its reset seed (its clock is
//! virtual and its randomness seeded: `docs/architecture.md`, sandbox rules), so replay is an
//! exact copy of the state; when it is not (state kept across resets, a hidden cache), the first
//! difference is named instead of handing back a wrong state.
//!
//! The checks are [`crate::replay`]'s, step by step; a fork stops at its step, where a replay
//! goes on to the end.

use crate::env::{Env, EnvCallError};
use crate::replay::{Divergence, step_difference};
use crate::trajectory::{Step, Trajectory, Turn};

/// Why a fork could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The trajectory has fewer steps than asked for.
    #[error("cannot fork {env_id} at step {step}: the trajectory records {recorded} env steps")]
    OutOfRange {
        /// The env id.
        env_id: String,
        /// The step asked for.
        step: usize,
        /// The steps recorded.
        recorded: usize,
    },
    /// A turn before the fork point has actions but no step records (a file written before
    /// step records), so its steps cannot be checked one by one.
    #[error(
        "cannot fork {env_id} at step {step}: turn {turn} has no step records (a trajectory file \
         written before them; `ragen-gym replay` checks it per turn)"
    )]
    NoStepRecords {
        /// The env id.
        env_id: String,
        /// The step asked for.
        step: usize,
        /// The turn without step records.
        turn: usize,
    },
    /// A recorded step before the fork point failed: no state follows it.
    #[error("cannot fork {env_id} at step {step}: recorded step {failed} failed ({message})")]
    RecordedFailure {
        /// The env id.
        env_id: String,
        /// The step asked for.
        step: usize,
        /// The failed step (0-based, over the whole trajectory).
        failed: usize,
        /// The recorded error.
        message: String,
    },
    /// The env returned something else than the record: it is not deterministic (or the
    /// plugin or its config differ from the recorded run's).
    #[error("{env_id} is not deterministic: fork at step {step} diverged: {divergence}")]
    Diverged {
        /// The env id.
        env_id: String,
        /// The step asked for.
        step: usize,
        /// The first difference (boxed: it carries both texts, and keeps `ForkError` small).
        divergence: Box<Divergence>,
    },
}

/// Where a fork left its env.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPoint {
    /// The observation at the fork point (the reset's for step 0), as recorded.
    pub observation: String,
    /// Env steps replayed.
    pub steps: usize,
    /// The episode had ended at the fork point.
    pub done: bool,
}

/// An env rebuilt at a recorded state ([`fork`]).
pub struct Forked {
    /// The env, in the state after the fork point's step; its next `step` continues from there.
    pub env: Box<dyn Env>,
    /// Where it is.
    pub point: ForkPoint,
}

impl std::fmt::Debug for Forked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forked")
            .field("env", &self.env.spec().id)
            .field("point", &self.point)
            .finish()
    }
}

/// Rebuild the state `t` reached after its first `step` env steps on `env` (an instance of the
/// recorded plugin with the recorded config, fresh or used) and hand it back there.
///
/// # Errors
/// [`ForkError`]: a step out of range, records that cannot be followed, or the first difference
/// between the env and the record.
pub fn fork(mut env: Box<dyn Env>, t: &Trajectory, step: usize) -> Result<Forked, ForkError> {
    let point = fork_in_place(env.as_mut(), t, step)?;
    Ok(Forked { env, point })
}

/// [`fork`] on a borrowed env.
///
/// # Errors
/// As [`fork`].
pub fn fork_in_place(
    env: &mut dyn Env,
    t: &Trajectory,
    step: usize,
) -> Result<ForkPoint, ForkError> {
    let path = steps_to(t, step)?;
    let diverged = |divergence| ForkError::Diverged {
        env_id: t.env_id.clone(),
        step,
        divergence: Box::new(divergence),
    };
    let mut observation = match env.reset(t.seed) {
        Ok(r) => r.observation,
        Err(e) => {
            return Err(diverged(at(
                None,
                None,
                None,
                "reset",
                "ok",
                &format!("error: {e}"),
            )));
        }
    };
    if let Some(first) = t.turns.first()
        && first.observation != observation
    {
        return Err(diverged(at(
            Some(0),
            None,
            None,
            "turn observation",
            &first.observation,
            &observation,
        )));
    }
    let mut done = false;
    for (turn, i, s) in path {
        let rec = s
            .outcome
            .as_ref()
            .expect("steps_to keeps recorded successes only");
        let got = env.step(&s.action).map_err(|e| {
            let replayed = format!("error: {e}");
            diverged(at(
                Some(turn),
                Some(i),
                Some(&s.action),
                "outcome",
                "ok",
                &replayed,
            ))
        })?;
        if let Some((field, a, b)) = step_difference(rec, &got) {
            return Err(diverged(at(
                Some(turn),
                Some(i),
                Some(&s.action),
                field,
                &a,
                &b,
            )));
        }
        done = got.terminated || got.truncated;
        observation = got.observation;
    }
    Ok(ForkPoint {
        observation,
        steps: step,
        done,
    })
}

/// The first `step` recorded steps of `t` as (turn, step in turn, step), each one that succeeded.
fn steps_to(t: &Trajectory, step: usize) -> Result<Vec<(usize, usize, &Step)>, ForkError> {
    let mut path = Vec::with_capacity(step);
    for (k, turn) in t.turns.iter().enumerate() {
        if path.len() == step {
            break;
        }
        if turn.steps.is_empty() && !turn.actions.is_empty() {
            return Err(ForkError::NoStepRecords {
                env_id: t.env_id.clone(),
                step,
                turn: k,
            });
        }
        for (i, s) in turn.steps.iter().enumerate() {
            if path.len() == step {
                break;
            }
            if let Err(message) = &s.outcome {
                return Err(ForkError::RecordedFailure {
                    env_id: t.env_id.clone(),
                    step,
                    failed: path.len(),
                    message: message.clone(),
                });
            }
            path.push((k, i, s));
        }
    }
    if path.len() < step {
        return Err(ForkError::OutOfRange {
            env_id: t.env_id.clone(),
            step,
            recorded: path.len(),
        });
    }
    Ok(path)
}

fn at(
    turn: Option<usize>,
    step: Option<usize>,
    action: Option<&str>,
    field: &'static str,
    recorded: &str,
    replayed: &str,
) -> Divergence {
    Divergence {
        turn,
        step,
        action: action.map(str::to_string),
        field,
        recorded: recorded.to_string(),
        replayed: replayed.to_string(),
    }
}

/// Record `actions` on `env` from `reset(seed)` as a trajectory of one action per turn, as the
/// rollout records steps, up to the step that ends the episode. For the fork check and tests.
///
/// # Errors
/// The env's error on reset or on a step.
pub fn record_actions(
    env: &mut dyn Env,
    seed: u64,
    actions: &[String],
) -> Result<Trajectory, EnvCallError> {
    let spec = env.spec().clone();
    let mut state = env.reset(seed)?.observation;
    let (mut turns, mut end) = (Vec::new(), None);
    for a in actions {
        let r = env.step(a)?;
        let observation = std::mem::replace(&mut state, r.observation.clone());
        let done = r.terminated || r.truncated;
        if done {
            end = Some(r.success);
        }
        turns.push(Turn {
            observation,
            actions_left: 0,
            response: String::new(),
            think: None,
            answer: Some(a.clone()),
            actions: vec![a.clone()],
            env_reward: r.reward,
            action_is_valid: r.action_is_valid,
            action_is_effective: r.action_is_effective,
            format_penalty: false,
            info: r.info.clone(),
            steps: vec![Step {
                action: a.clone(),
                outcome: Ok(r),
                expert: None,
            }],
            sampled: None,
        });
        if done {
            break;
        }
    }
    let name = spec.id.rsplit('/').next().unwrap_or(&spec.id).to_string();
    Ok(Trajectory {
        env_id: spec.id,
        tag: name,
        group: 0,
        seed,
        num_actions: turns.len(),
        turns,
        final_observation: state,
        terminated: end.is_some(),
        truncated: end != Some(true),
        success: end == Some(true),
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    })
}

#[cfg(test)]
mod tests;
