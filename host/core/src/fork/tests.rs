use super::*;
use ragen_gym_sdk::{EnvSpec, ResetResult, StepResult};

/// A position on a line: `Right` +1 (reward 1), `Left` -1 (reward 0), done at 3. With `leak`,
/// the observation also counts every step the instance ever took, across resets: state a reset
/// does not clear, the kind of nondeterminism a sandbox cannot rule out.
struct Line {
    spec: EnvSpec,
    pos: i64,
    lifetime_steps: u64,
    leak: bool,
}

impl Line {
    fn new(leak: bool) -> Self {
        let mut spec = EnvSpec::new("walk").actions(["Left", "Right"]).max_steps(9);
        spec.id = "test/Env-v0".into();
        Self {
            spec,
            pos: 0,
            lifetime_steps: 0,
            leak,
        }
    }
}

impl Env for Line {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.pos = (seed % 2) as i64;
        Ok(ResetResult {
            observation: format!("at {}", self.pos),
            info: vec![],
        })
    }
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        let right = action == "Right";
        self.pos += if right { 1 } else { -1 };
        self.lifetime_steps += 1;
        let observation = if self.leak {
            format!("at {} ({} steps so far)", self.pos, self.lifetime_steps)
        } else {
            format!("at {}", self.pos)
        };
        Ok(StepResult::new(observation)
            .reward(if right { 1.0 } else { 0.0 })
            .terminated(self.pos >= 3)
            .success(self.pos >= 3))
    }
}

fn actions(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_fork_at_step_k_is_the_recorded_state_and_continues_like_the_record() {
    // seed 0 starts at 0: Left, Right, Right, Left, Right, Right, Right reaches 3 at the end
    let path = actions(&["Left", "Right", "Right", "Left", "Right", "Right", "Right"]);
    let t = record_actions(&mut Line::new(false), 0, &path).unwrap();
    assert_eq!(t.turns.len(), 7);
    assert!(t.success && t.terminated);
    for k in 0..=7 {
        let f = fork(Box::new(Line::new(false)), &t, k).unwrap();
        let want = if k < 7 {
            t.turns[k].observation.clone()
        } else {
            t.final_observation.clone()
        };
        assert_eq!(f.point.observation, want, "step {k}");
        assert_eq!(f.point.steps, k);
        assert_eq!(f.point.done, k == 7);
        // the forked env's next step is the recorded one
        if let Some(action) = path.get(k) {
            let mut env = f.env;
            let next = env.step(action).unwrap();
            assert_eq!(Ok(next), t.turns[k].steps[0].outcome, "step {k}");
        }
    }
    // one instance forks again and again (each fork resets it)
    let mut env = Line::new(false);
    for k in [5, 2, 7, 0] {
        let p = fork_in_place(&mut env, &t, k).unwrap();
        assert_eq!(p.steps, k);
    }
}

#[test]
fn steps_count_across_turns_of_several_actions() {
    // The same 4 steps as two turns of two: step 3 is turn 1's second step.
    let path = actions(&["Right", "Left", "Right", "Right"]);
    let mut t = record_actions(&mut Line::new(false), 1, &path).unwrap();
    assert_eq!(t.final_observation, "at 3");
    let second = t.turns.remove(1);
    t.turns[0].steps.extend(second.steps);
    let fourth = t.turns.pop().unwrap();
    t.turns[1].steps.extend(fourth.steps);
    assert_eq!((t.turns.len(), t.turns[1].steps.len()), (2, 2));
    // from 1: Right 2, Left 1, Right 2
    assert_eq!(
        fork_in_place(&mut Line::new(false), &t, 3)
            .unwrap()
            .observation,
        "at 2"
    );
    // an edited reward in turn 1's second step is named there
    if let Ok(r) = &mut t.turns[1].steps[1].outcome {
        r.reward = 0.5;
    }
    let e = fork_in_place(&mut Line::new(false), &t, 4).unwrap_err();
    let ForkError::Diverged { divergence: d, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!((d.turn, d.step, d.field), (Some(1), Some(1), "reward"));
    assert_eq!(
        e.to_string(),
        "test/Env-v0 is not deterministic: fork at step 4 diverged: turn 1, step 1 \
         (action \"Right\"): reward recorded \"0.5\", replayed \"1.0\""
    );
}

#[test]
fn a_nondeterministic_env_is_named_at_its_first_difference() {
    // Recorded on a fresh instance, forked on the same instance: its step counter did not
    // restart with the reset, so the first step's observation already differs.
    let mut env = Line::new(true);
    let t = record_actions(&mut env, 0, &actions(&["Right", "Right"])).unwrap();
    assert_eq!(t.turns[1].observation, "at 1 (1 steps so far)");
    let e = fork_in_place(&mut env, &t, 2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "test/Env-v0 is not deterministic: fork at step 2 diverged: turn 0, step 0 \
         (action \"Right\"): observation recorded \"at 1 (1 steps so far)\", replayed \
         \"at 1 (3 steps so far)\""
    );
    // the reset alone still matches: a fork at step 0 cannot see it
    assert_eq!(fork_in_place(&mut env, &t, 0).unwrap().observation, "at 0");
}

#[test]
fn forks_beyond_or_across_what_was_recorded_are_refused() {
    let mut t = record_actions(&mut Line::new(false), 0, &actions(&["Right", "Left"])).unwrap();
    let e = fork_in_place(&mut Line::new(false), &t, 3).unwrap_err();
    assert!(
        matches!(
            e,
            ForkError::OutOfRange {
                step: 3,
                recorded: 2,
                ..
            }
        ),
        "{e}"
    );
    // a recorded failure ends what can be followed
    t.turns[1].steps[0].outcome = Err("trap: unreachable".into());
    let e = fork_in_place(&mut Line::new(false), &t, 2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot fork test/Env-v0 at step 2: recorded step 1 failed (trap: unreachable)"
    );
    assert!(fork_in_place(&mut Line::new(false), &t, 1).is_ok());
    // files without step records
    t.turns[0].steps.clear();
    let e = fork_in_place(&mut Line::new(false), &t, 1).unwrap_err();
    assert!(matches!(e, ForkError::NoStepRecords { turn: 0, .. }), "{e}");
    // another seed: the reset differs from the record
    let mut other = record_actions(&mut Line::new(false), 0, &actions(&["Right"])).unwrap();
    other.seed = 1;
    let e = fork_in_place(&mut Line::new(false), &other, 1).unwrap_err();
    let ForkError::Diverged { divergence: d, .. } = e else {
        panic!("{e}");
    };
    assert_eq!(
        (d.turn, d.field, d.replayed.as_str()),
        (Some(0), "turn observation", "at 1")
    );
}
