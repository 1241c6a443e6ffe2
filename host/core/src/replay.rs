//! Env-side replay: re-run a recorded [`Trajectory`] against an env (same config, same plugin)
//! from its seed and its actions, and check every observation, reward and flag the env returns
//! against the record. Envs are deterministic given the reset seed (`docs/architecture.md`,
//! sandbox rules), so the first difference means the plugin, its config or its inputs differ
//! from the recorded run — or the env is not deterministic.

use crate::env::Env;
use crate::trajectory::{Step, Trajectory, Turn};
use ragen_gym_sdk::{Metric, StepResult};

/// The first place where the replayed env disagrees with the record.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// Turn index (0-based); `None` for the reset and for the final state.
    pub turn: Option<usize>,
    /// Step index within the turn (0-based), when the difference is in a step's result.
    pub step: Option<usize>,
    /// The action of that step.
    pub action: Option<String>,
    /// What differs: `reset`, `observation`, `reward`, `terminated`, `truncated`,
    /// `action_is_valid`, `action_is_effective`, `success` (a step's, or with no turn the
    /// trajectory's), `info`, `outcome` (one side failed), `turn observation`, `turn env_reward`,
    /// `final observation`.
    pub field: &'static str,
    /// The recorded value, rendered as text.
    pub recorded: String,
    /// The replayed value, rendered as text.
    pub replayed: String,
}

/// One line: where (`turn T, step K (action "A")`, `reset` or `end of trajectory`), the field,
/// and both values.
impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.turn, self.step) {
            (Some(t), Some(k)) => write!(f, "turn {t}, step {k}")?,
            (Some(t), None) => write!(f, "turn {t}")?,
            (None, _) if self.field == "reset" => write!(f, "reset")?,
            (None, _) => write!(f, "end of trajectory")?,
        }
        if let Some(a) = &self.action {
            write!(f, " (action {a:?})")?;
        }
        write!(
            f,
            ": {} recorded {:?}, replayed {:?}",
            self.field, self.recorded, self.replayed
        )
    }
}

/// What a successful replay covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Turns replayed.
    pub turns: usize,
    /// Env steps replayed and checked.
    pub steps: usize,
}

fn info_text(info: &[Metric]) -> String {
    info.iter()
        .map(|m| format!("{} = {:?}\n", m.name, m.value))
        .collect()
}

fn same_f64(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The first field of two step results that differs, as (field, recorded, replayed).
pub(crate) fn step_difference(
    rec: &StepResult,
    got: &StepResult,
) -> Option<(&'static str, String, String)> {
    let flag = |name, a: bool, b: bool| (a != b).then(|| (name, a.to_string(), b.to_string()));
    if rec.observation != got.observation {
        return Some((
            "observation",
            rec.observation.clone(),
            got.observation.clone(),
        ));
    }
    if !same_f64(rec.reward, got.reward) {
        return Some((
            "reward",
            format!("{:?}", rec.reward),
            format!("{:?}", got.reward),
        ));
    }
    flag("terminated", rec.terminated, got.terminated)
        .or_else(|| flag("truncated", rec.truncated, got.truncated))
        .or_else(|| flag("action_is_valid", rec.action_is_valid, got.action_is_valid))
        .or_else(|| {
            flag(
                "action_is_effective",
                rec.action_is_effective,
                got.action_is_effective,
            )
        })
        .or_else(|| flag("success", rec.success, got.success))
        .or_else(|| {
            let (a, b) = (info_text(&rec.info), info_text(&got.info));
            (a != b).then_some(("info", a, b))
        })
}

/// Replay `t` on `env` (built with the recorded config): reset with `t.seed`, then every
/// recorded action, comparing each result with the record, then what the score and success
/// derive from: each turn's `env_reward` against the sum of its replayed step rewards, and the
/// trajectory's `success` against the step that ended it. Files written before step records
/// (turns with actions but no `steps`) are checked at turn granularity: each turn's starting
/// observation and summed env reward.
///
/// # Errors
/// The first [`Divergence`].
pub fn replay_trajectory(env: &mut dyn Env, t: &Trajectory) -> Result<ReplaySummary, Divergence> {
    let Some(mut state) = replay_reset(env, t)? else {
        return Ok(ReplaySummary { turns: 0, steps: 0 });
    };
    let mut steps = 0;
    let mut progress = Progress::default();
    for (k, turn) in t.turns.iter().enumerate() {
        if turn.observation != state {
            return Err(Divergence {
                turn: Some(k),
                step: None,
                action: None,
                field: "turn observation",
                recorded: turn.observation.clone(),
                replayed: state,
            });
        }
        if turn.steps.is_empty() {
            // Before step records: replay the actions.
            replay_actions(env, k, turn, &mut state, &mut progress)?;
            steps += turn.actions.len();
        } else {
            replay_steps(env, k, &turn.steps, &mut state, &mut progress)?;
            steps += turn.steps.len();
        }
        progress.check_turn(k, turn)?;
    }
    if progress.success != t.success {
        return Err(Divergence {
            turn: None,
            step: None,
            action: None,
            field: "success",
            recorded: t.success.to_string(),
            replayed: progress.success.to_string(),
        });
    }
    if state != t.final_observation {
        return Err(Divergence {
            turn: None,
            step: None,
            action: None,
            field: "final observation",
            recorded: t.final_observation.clone(),
            replayed: state,
        });
    }
    Ok(ReplaySummary {
        turns: t.turns.len(),
        steps,
    })
}

/// Reset `env` with the recorded seed: the first observation, or `None` when the recorded reset
/// failed and this one fails too (nothing more to replay).
fn replay_reset(env: &mut dyn Env, t: &Trajectory) -> Result<Option<String>, Divergence> {
    let reset_failed = t
        .end_reason
        .as_deref()
        .is_some_and(|r| r.starts_with("reset failed"));
    let differs = |recorded: String, replayed: String| Divergence {
        turn: None,
        step: None,
        action: None,
        field: "reset",
        recorded,
        replayed,
    };
    match env.reset(t.seed) {
        Ok(r) if !reset_failed => Ok(Some(r.observation)),
        Ok(r) => Err(differs(
            t.end_reason.clone().unwrap_or_default(),
            format!("ok: {}", r.observation),
        )),
        Err(_) if reset_failed => Ok(None),
        Err(e) => Err(differs("ok".into(), format!("error: {e}"))),
    }
}

/// Replay the actions of turn `k`, recorded without step records: every action must run, and
/// their rewards must add up to the turn's.
fn replay_actions(
    env: &mut dyn Env,
    k: usize,
    turn: &Turn,
    state: &mut String,
    progress: &mut Progress,
) -> Result<(), Divergence> {
    for (i, a) in turn.actions.iter().enumerate() {
        let r = env.step(a).map_err(|e| Divergence {
            turn: Some(k),
            step: Some(i),
            action: Some(a.clone()),
            field: "outcome",
            recorded: "ok".into(),
            replayed: format!("error: {e}"),
        })?;
        progress.add(&r);
        *state = r.observation;
    }
    Ok(())
}

/// What the replayed steps add up to: a turn's env reward, and whether a step finished the
/// episode with success (the rollout's rule, `host/starpo/src/rollout/episode.rs`: the trajectory
/// succeeds when the step that ends it reports success).
#[derive(Default)]
struct Progress {
    turn_reward: f64,
    success: bool,
}

impl Progress {
    fn add(&mut self, r: &StepResult) {
        self.turn_reward += r.reward;
        if r.terminated || r.truncated {
            self.success = r.success;
        }
    }

    /// The turn's summed reward against the recorded one (the rollout adds the step rewards in
    /// order from 0, so they agree exactly), then a fresh sum for the next turn.
    fn check_turn(&mut self, k: usize, turn: &Turn) -> Result<(), Divergence> {
        let reward = std::mem::take(&mut self.turn_reward);
        if same_f64(reward, turn.env_reward) {
            return Ok(());
        }
        Err(Divergence {
            turn: Some(k),
            step: None,
            action: None,
            field: "turn env_reward",
            recorded: format!("{:?}", turn.env_reward),
            replayed: format!("{reward:?}"),
        })
    }
}

/// Replay the recorded steps of turn `k`, checking every result the env returns; adds the
/// replayed rewards to `reward` and records a finishing step's `success` in `done`.
fn replay_steps(
    env: &mut dyn Env,
    k: usize,
    recorded: &[Step],
    state: &mut String,
    progress: &mut Progress,
) -> Result<(), Divergence> {
    for (i, s) in recorded.iter().enumerate() {
        let at = |field, recorded, replayed| Divergence {
            turn: Some(k),
            step: Some(i),
            action: Some(s.action.clone()),
            field,
            recorded,
            replayed,
        };
        match (&s.outcome, env.step(&s.action)) {
            (Ok(rec), Ok(got)) => {
                if let Some((field, a, b)) = step_difference(rec, &got) {
                    return Err(at(field, a, b));
                }
                progress.add(&got);
                *state = got.observation;
            }
            // The env failed again (a trap or an env error); the messages may carry
            // run-specific detail, so only the failure itself is compared.
            (Err(_), Err(_)) => {}
            (Ok(_), Err(e)) => return Err(at("outcome", "ok".into(), format!("error: {e}"))),
            (Err(m), Ok(got)) => {
                return Err(at(
                    "outcome",
                    format!("error: {m}"),
                    format!("ok: {}", got.observation),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvCallError;
    use crate::trajectory::Turn;
    use ragen_gym_sdk::{EnvSpec, ResetResult};

    /// Position on a line: `Right` adds 1 (reward 1), `Left` subtracts 1 (reward -0.5); done at 3.
    struct Line {
        spec: EnvSpec,
        pos: i64,
        bias: i64,
        right_reward: f64,
    }

    impl Line {
        fn new(bias: i64) -> Self {
            Self {
                spec: EnvSpec {
                    id: "t/Line-v0".into(),
                    version: "0.1.0".into(),
                    description: String::new(),
                    instruction: String::new(),
                    action_names: Some(vec!["Left".into(), "Right".into()]),
                    symbol_legend: None,
                    max_episode_steps: 9,
                    reward_threshold: None,
                    default_config: "{}".into(),
                },
                pos: 0,
                bias,
                right_reward: 1.0,
            }
        }
    }

    impl Env for Line {
        fn spec(&self) -> &EnvSpec {
            &self.spec
        }
        fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
            self.pos = seed as i64 % 2;
            Ok(ResetResult {
                observation: format!("at {}", self.pos),
                info: vec![],
            })
        }
        fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
            let (d, r) = if action == "Right" {
                (1, self.right_reward)
            } else {
                (-1, -0.5)
            };
            self.pos += d + self.bias;
            Ok(StepResult {
                observation: format!("at {}", self.pos),
                reward: r,
                terminated: self.pos >= 3,
                truncated: false,
                action_is_valid: true,
                action_is_effective: true,
                success: self.pos >= 3,
                info: vec![Metric::new("pos", self.pos as f64)],
            })
        }
    }

    /// Record a trajectory of `actions` per turn on `env`, as the rollout does.
    fn record(env: &mut dyn Env, seed: u64, turns: &[&[&str]]) -> Trajectory {
        let mut state = env.reset(seed).unwrap().observation;
        let mut out = Vec::new();
        for actions in turns {
            let mut t = Turn {
                observation: state.clone(),
                actions_left: 9,
                response: String::new(),
                think: None,
                answer: None,
                actions: vec![],
                env_reward: 0.0,
                action_is_valid: true,
                action_is_effective: false,
                format_penalty: false,
                info: vec![],
                steps: vec![],
                sampled: None,
            };
            for a in *actions {
                let r = env.step(a).unwrap();
                t.actions.push(a.to_string());
                t.env_reward += r.reward;
                state = r.observation.clone();
                t.steps.push(Step {
                    action: a.to_string(),
                    outcome: Ok(r),
                    expert: None,
                });
            }
            out.push(t);
        }
        Trajectory {
            env_id: "t/Line-v0".into(),
            tag: "Line".into(),
            group: 0,
            seed,
            turns: out,
            final_observation: state,
            num_actions: 3,
            terminated: false,
            truncated: true,
            success: false,
            penalty: 0.0,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    #[test]
    fn the_same_env_replays_every_step() {
        let t = record(&mut Line::new(0), 1, &[&["Right", "Left"], &["Right"]]);
        let s = replay_trajectory(&mut Line::new(0), &t).unwrap();
        assert_eq!(s, ReplaySummary { turns: 2, steps: 3 });
        // a JSON round trip (trajectories.jsonl) keeps it replayable
        let back: Trajectory = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(
            replay_trajectory(&mut Line::new(0), &back).unwrap().steps,
            3
        );
    }

    #[test]
    fn the_first_differing_step_is_reported() {
        let t = record(&mut Line::new(0), 1, &[&["Right", "Left"], &["Right"]]);
        // a biased env drifts from the first step: position 1+1+1 = 3 instead of 2
        let d = replay_trajectory(&mut Line::new(1), &t).unwrap_err();
        assert_eq!(
            (d.turn, d.step, d.action.as_deref(), d.field),
            (Some(0), Some(0), Some("Right"), "observation")
        );
        assert_eq!((d.recorded.as_str(), d.replayed.as_str()), ("at 2", "at 3"));
        // an edited reward is caught at its step, after the observations matched
        let mut t2 = t.clone();
        if let Ok(r) = &mut t2.turns[1].steps[0].outcome {
            r.reward = 2.0;
        }
        let d = replay_trajectory(&mut Line::new(0), &t2).unwrap_err();
        assert_eq!((d.turn, d.step, d.field), (Some(1), Some(0), "reward"));
        assert_eq!((d.recorded.as_str(), d.replayed.as_str()), ("2.0", "1.0"));
        // a different seed changes the reset observation
        let mut t3 = t.clone();
        t3.seed = 2;
        let d = replay_trajectory(&mut Line::new(0), &t3).unwrap_err();
        assert_eq!((d.turn, d.field), (Some(0), "turn observation"));
    }

    #[test]
    fn what_the_score_and_success_derive_from_is_checked() {
        let t = record(&mut Line::new(0), 1, &[&["Right", "Left"], &["Right"]]);
        // Turn 0's steps pay 1.0 and -0.5: an edited turn reward with its steps left alone
        let mut edited = t.clone();
        edited.turns[0].env_reward = 5.0;
        let d = replay_trajectory(&mut Line::new(0), &edited).unwrap_err();
        assert_eq!(
            (d.turn, d.step, d.field),
            (Some(0), None, "turn env_reward")
        );
        assert_eq!((d.recorded.as_str(), d.replayed.as_str()), ("5.0", "0.5"));
        // no step ended the episode, so it did not succeed: a flipped flag is caught
        let mut flipped = t.clone();
        flipped.success = true;
        let d = replay_trajectory(&mut Line::new(0), &flipped).unwrap_err();
        assert_eq!((d.turn, d.field), (None, "success"));
        assert_eq!(
            (d.recorded.as_str(), d.replayed.as_str()),
            ("true", "false")
        );
        // from seed 1 (position 1), Right twice reaches 3: terminated with success
        let mut won = record(&mut Line::new(0), 1, &[&["Right", "Right"]]);
        let d = replay_trajectory(&mut Line::new(0), &won).unwrap_err();
        assert_eq!((d.field, d.recorded.as_str()), ("success", "false"));
        won.success = true;
        assert_eq!(replay_trajectory(&mut Line::new(0), &won).unwrap().steps, 2);
    }

    #[test]
    fn records_without_steps_are_checked_per_turn() {
        let mut t = record(&mut Line::new(0), 1, &[&["Right", "Left"], &["Right"]]);
        for turn in &mut t.turns {
            turn.steps.clear();
        }
        assert_eq!(replay_trajectory(&mut Line::new(0), &t).unwrap().steps, 3);
        let d = replay_trajectory(&mut Line::new(1), &t).unwrap_err();
        assert_eq!((d.turn, d.field), (Some(1), "turn observation"));
    }

    #[test]
    fn rewards_read_back_from_json_replay_bit_for_bit() {
        // 17 significant digits: serde_json without its `float_roundtrip` feature read this
        // reward back one ulp off (941592.937817472), and replay reported a faithful env as
        // diverged at its first step
        for reward in [
            941_592.937_817_471_9,
            0.1 + 0.2,
            1e-310,
            f64::MIN_POSITIVE,
            -f64::MAX,
        ] {
            let mut env = Line::new(0);
            env.right_reward = reward;
            let t = record(&mut env, 1, &[&["Right", "Left"], &["Right"]]);
            let back: Trajectory =
                serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
            let Ok(step) = &back.turns[1].steps[0].outcome else {
                panic!("a recorded step failed");
            };
            assert_eq!(step.reward.to_bits(), reward.to_bits(), "{reward:?}");
            let mut env = Line::new(0);
            env.right_reward = reward;
            assert_eq!(replay_trajectory(&mut env, &back).unwrap().steps, 3);
        }
    }

    #[test]
    fn every_finite_f64_reads_back_from_json_exactly() {
        // the whole kind: 200k random bit patterns (all exponents), as `trajectories.jsonl` and
        // `metrics.jsonl` write them
        let mut state = 7_u64;
        let mut checked = 0;
        while checked < 200_000 {
            let x = f64::from_bits(crate::splitmix64(&mut state));
            if !x.is_finite() {
                continue;
            }
            let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x:?} read back as {back:?}");
            checked += 1;
        }
    }
}
