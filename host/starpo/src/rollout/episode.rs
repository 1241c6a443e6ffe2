//! One env's trajectory while it is rolled out (RAGEN `ragen/llm_agent/es_manager.py`, one
//! `EnvStatus`): its turns so far, the state the env last showed, and its status, one of
//! running, finished by the env, out of action budget, or failed (`docs/ragen-semantics.md` §2).
//! The time its env calls take adds up against the trajectory's wall budget
//! (`failure.trajectory_wall_s`); running out ends it as a timeout.

use super::{Generation, RolloutParams};
use crate::prompt::{
    ParsedResponse, Tokenize, TokenizeError, TurnView, build_messages, forced_prefix, map_actions,
    parse_response, turn_views,
};
use ragen_gym_core::{
    Env, EnvCallError, EpisodeFailure, Step, StepResult, Trajectory, Turn, fork_in_place,
};
use std::time::{Duration, Instant};

/// Where an episode stands.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Status {
    /// Still taking turns (when the turns run out, the trajectory is truncated).
    Running,
    /// The env reported done, with or without success.
    Finished {
        /// The env's verdict.
        success: bool,
    },
    /// The action budget (`max_actions_per_traj`) is spent without the env being done.
    BudgetSpent,
    /// Ended early by the host: a failed reset or step, the wall budget spent (with the class of
    /// the env-side failure), or a prompt over `max_model_len` (without one).
    Failed {
        /// What happened.
        reason: String,
        /// The env-side failure, if it was one.
        failure: Option<EpisodeFailure>,
    },
}

/// One env's trajectory in progress.
pub(super) struct Episode {
    group: usize,
    seed: u64,
    turns: Vec<Turn>,
    /// The state the env showed last (the reset's observation, then each step's).
    state: String,
    num_actions: usize,
    penalty: f64,
    status: Status,
    /// Time spent in the env's calls so far.
    env_time: Duration,
    /// Ask the env's expert before each step (`rollout.expert_agreement` and an env with one).
    advise: bool,
}

impl Episode {
    /// A new episode of env group `group`, to be reset with `seed`.
    pub(super) fn new(group: usize, seed: u64) -> Self {
        Self {
            group,
            seed,
            turns: Vec::new(),
            state: String::new(),
            num_actions: 0,
            penalty: 0.0,
            status: Status::Running,
            env_time: Duration::ZERO,
            advise: false,
        }
    }

    /// A branch of `root` after its first `k` turns (`root` played more than `k`): the same
    /// group and seed, a copy of those turns (each with its sampled tokens, so the history's
    /// tokens are the parent's), and the state `root` answered in turn `k`. Its env is not
    /// there yet: [`Episode::fork`] rebuilds it.
    pub(super) fn branch(root: &Trajectory, k: usize, p: &RolloutParams) -> Self {
        let turns = root.turns[..k].to_vec();
        let penalised = turns.iter().filter(|t| t.format_penalty).count();
        Self {
            group: root.group,
            seed: root.seed,
            num_actions: turns.iter().map(|t| t.actions.len()).sum(),
            penalty: penalised as f64 * p.format_penalty,
            state: root.turns[k].observation.clone(),
            turns,
            status: Status::Running,
            env_time: Duration::ZERO,
            advise: false,
        }
    }

    /// Put `env` in the state of a branch made by [`Episode::branch`] from `root`: reset with the
    /// seed and replay the copied turns' steps, checked against `root`'s record
    /// ([`ragen_gym_core::fork_in_place`]). A fork that fails or diverges ends the branch as a
    /// plugin failure (a plugin that is not deterministic breaks the sandbox's contract).
    pub(super) fn fork(&mut self, env: &mut dyn Env, root: &Trajectory, p: &RolloutParams) {
        let start = Instant::now();
        let steps = self.turns.iter().map(|t| t.steps.len()).sum();
        match fork_in_place(env, root, steps) {
            Ok(point) if point.observation == self.state && !point.done => {}
            Ok(point) => {
                self.status = Status::Failed {
                    reason: format!(
                        "fork after {steps} steps reached {:?} (done: {}), the record {:?}",
                        point.observation, point.done, self.state
                    ),
                    failure: Some(EpisodeFailure::Trap),
                }
            }
            Err(e) => {
                self.status = Status::Failed {
                    reason: format!("fork failed: {e}"),
                    failure: Some(EpisodeFailure::Trap),
                }
            }
        }
        self.advise = wants_advice(env, p);
        self.charge(start, p);
    }

    /// Turns taken so far (copied ones included).
    pub(super) fn turns_played(&self) -> usize {
        self.turns.len()
    }

    /// Whether the episode takes another turn.
    pub(super) fn is_running(&self) -> bool {
        self.status == Status::Running
    }

    /// The seed it was reset with.
    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    /// Actions it may still take: the trajectory's budget less those taken.
    pub(super) fn actions_left(&self, p: &RolloutParams) -> usize {
        p.max_actions_per_traj.saturating_sub(self.num_actions)
    }

    /// Reset `env` with the episode's seed; a failure ends the episode.
    pub(super) fn reset(&mut self, env: &mut dyn Env, p: &RolloutParams) {
        let t = Instant::now();
        let r = env.reset(self.seed);
        match r {
            Ok(r) => self.state = r.observation,
            Err(e) => self.fail("reset failed", &e),
        }
        self.advise = wants_advice(env, p);
        self.charge(t, p);
    }

    /// End the episode with a failed env call.
    fn fail(&mut self, what: &str, e: &EnvCallError) {
        self.status = Status::Failed {
            reason: format!("{what}: {e}"),
            failure: Some(EpisodeFailure::of(e)),
        };
    }

    /// Add the time since `start` to the env's time; past the wall budget, the episode ends.
    fn charge(&mut self, start: Instant, p: &RolloutParams) {
        self.env_time += start.elapsed();
        if let Some(budget) = p.trajectory_wall_budget
            && self.env_time > budget
            && self.is_running()
        {
            self.status = Status::Failed {
                reason: format!(
                    "wall budget exceeded: the env's calls took {:.3} s, over \
                     failure.trajectory_wall_s = {}",
                    self.env_time.as_secs_f64(),
                    budget.as_secs_f64()
                ),
                failure: Some(EpisodeFailure::Timeout),
            };
        }
    }

    /// The token ids of the next generation prompt (the history, then the current state, then
    /// the forced prefix), or `None` when it is longer than `max_model_len`, which ends the
    /// episode.
    pub(super) fn prompt(
        &mut self,
        p: &RolloutParams,
        tokenizer: &dyn Tokenize,
    ) -> Result<Option<Vec<u32>>, TokenizeError> {
        let mut views = turn_views(&self.turns);
        views.push(TurnView {
            state: self.state.clone(),
            actions_left: p.max_actions_per_traj.saturating_sub(self.num_actions),
            response: None,
            sampled: None,
            reward: None,
        });
        let messages = build_messages(&p.prompt, &views);
        let ids = tokenizer.encode_prompt(&messages, forced_prefix(p.prompt.enable_think))?;
        if ids.len() > p.max_model_len {
            self.status = Status::Failed {
                reason: format!(
                    "prompt of {} tokens exceeds max_model_len {}",
                    ids.len(),
                    p.max_model_len
                ),
                failure: None,
            };
            return Ok(None);
        }
        Ok(Some(ids))
    }

    /// Take one turn: parse `generation`, run its valid actions on `env` within the budget
    /// (`action_names`: the env's list, `None` for free-text actions), and record the turn.
    pub(super) fn apply(
        &mut self,
        generation: Generation,
        env: &mut dyn Env,
        p: &RolloutParams,
        action_names: Option<&[String]>,
    ) {
        let parsed = parse(&generation, p);
        let (valid, dropped) = map_actions(&parsed.actions, action_names);
        let bad_format = parsed.answer.is_none() || parsed.actions.is_empty() || dropped;
        if bad_format {
            self.penalty += p.format_penalty;
        }
        let budget = p.max_actions_per_traj.saturating_sub(self.num_actions);
        let mut turn = Turn {
            observation: self.state.clone(),
            actions_left: budget,
            response: parsed.cleaned,
            think: parsed.think,
            answer: parsed.answer,
            actions: Vec::new(),
            env_reward: 0.0,
            action_is_valid: !bad_format,
            action_is_effective: false,
            format_penalty: bad_format,
            info: Vec::new(),
            steps: Vec::new(),
            sampled: generation.trace,
        };
        for action in valid.into_iter().take(budget) {
            let t = Instant::now();
            let more = self.step(env, action, &mut turn);
            self.charge(t, p);
            if !more || !self.is_running() {
                break;
            }
        }
        if self.is_running() && self.num_actions >= p.max_actions_per_traj {
            self.status = Status::BudgetSpent;
        }
        self.turns.push(turn);
    }

    /// Send one action to `env` and record it on `turn` (with the expert's advice first, when
    /// asked for); whether the episode goes on.
    fn step(&mut self, env: &mut dyn Env, action: String, turn: &mut Turn) -> bool {
        let expert = self.advice(env);
        match env.step(&action) {
            Ok(r) => {
                self.num_actions += 1;
                record_step(turn, action, &r, expert);
                let done = r.terminated || r.truncated;
                if done {
                    self.status = Status::Finished { success: r.success };
                }
                self.state = r.observation;
                !done
            }
            Err(e) => {
                turn.steps.push(Step {
                    action,
                    outcome: Err(e.to_string()),
                    expert,
                });
                self.fail("step failed", &e);
                false
            }
        }
    }

    /// The expert's advice in the current state, when this episode asks for it. An env whose
    /// expert fails is not asked again in this episode, and the failure does not end it by
    /// itself: the advice is a diagnostic, not part of the rollout (a plugin that traps in it
    /// loses its instance, as a trap anywhere does, and its next step then fails).
    fn advice(&mut self, env: &mut dyn Env) -> Option<Vec<String>> {
        if !self.advise {
            return None;
        }
        match env.advise() {
            Ok(a) => Some(a.actions),
            Err(e) => {
                tracing::debug!(seed = self.seed, "expert advice stopped: {e}");
                self.advise = false;
                None
            }
        }
    }

    /// The finished trajectory, with RAGEN's flags (`docs/ragen-semantics.md` §2): done by the
    /// env is `terminated`, and `truncated` unless it succeeded; a spent budget is both; turns
    /// running out or a failure is `truncated` only.
    pub(super) fn into_trajectory(self, env_id: &str, tag: &str) -> Trajectory {
        let (terminated, truncated, success, end_reason, failure) = match self.status {
            Status::Finished { success } => (true, !success, success, None, None),
            Status::BudgetSpent => (true, true, false, None, None),
            Status::Running => (false, true, false, None, None),
            Status::Failed { reason, failure } => (false, true, false, Some(reason), failure),
        };
        Trajectory {
            env_id: env_id.to_string(),
            tag: tag.to_string(),
            group: self.group,
            seed: self.seed,
            turns: self.turns,
            final_observation: self.state,
            num_actions: self.num_actions,
            terminated,
            truncated,
            success,
            penalty: self.penalty,
            extra_reward: 0.0,
            end_reason,
            failure,
        }
    }
}

/// Whether an episode on `env` asks its expert before each step: `rollout.expert_agreement` and
/// an env that has an expert for its config (an error asking counts as none).
fn wants_advice(env: &mut dyn Env, p: &RolloutParams) -> bool {
    p.expert_agreement && matches!(env.expert_info(), Ok(Some(_)))
}

/// The response with its forced prefix, parsed. A response sampled under constrained decoding
/// keeps its raw text as the stored response, so that the history shows what its sampled tokens
/// spell.
fn parse(generation: &Generation, p: &RolloutParams) -> ParsedResponse {
    let full = format!(
        "{}{}",
        forced_prefix(p.prompt.enable_think),
        generation.text
    );
    let parsed = parse_response(
        &full,
        p.prompt.enable_think,
        &p.action_sep,
        p.max_actions_per_turn,
    );
    if generation.trace.is_some() {
        ParsedResponse {
            cleaned: full,
            ..parsed
        }
    } else {
        parsed
    }
}

/// Add one env step's result to its turn. The env's own validity verdict counts too
/// (text-action envs such as WebShop judge validity themselves; `docs/ragen-semantics.md` §2).
fn record_step(turn: &mut Turn, action: String, r: &StepResult, expert: Option<Vec<String>>) {
    turn.steps.push(Step {
        action: action.clone(),
        outcome: Ok(r.clone()),
        expert,
    });
    turn.actions.push(action);
    turn.env_reward += r.reward;
    turn.action_is_effective |= r.action_is_effective;
    turn.action_is_valid &= r.action_is_valid;
    turn.info = r.info.clone();
}
