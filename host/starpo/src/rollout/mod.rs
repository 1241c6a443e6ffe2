//! The env state manager and the multi-turn rollout (`docs/ragen-semantics.md` §1 and §2; RAGEN
//! `ragen/llm_agent/es_manager.py`, `ragen/llm_agent/agent_proxy.py::LLMAgentProxy.rollout`).
//!
//! `env_groups x group_size` envs; group members reset with the same seed. Each turn the prompts
//! of all running episodes are sampled in batches, and each episode parses its answer and steps
//! its env, in parallel; finished episodes leave the batch. A plugin trap or env error ends only
//! that trajectory. [`episode`] holds one trajectory in progress, [`pool`] the env instances,
//! [`generator`] the model's port, [`expert`] the same rollout with the env's expert as the
//! policy (demonstrations), [`branch`] the continuations forked from a rollout's trajectories
//! (tree-shaped rollouts, `rollout.branch`).

pub mod branch;
mod episode;
mod expert;
mod generator;
mod pool;

pub use expert::{ExpertRolloutError, answer_joiner, expert_answer, expert_rollout};
pub use generator::{GenerateError, Generation, GenerationParams, Generator};
pub use pool::{EnvFactory, EnvPool};

use crate::config::Config;
use crate::prompt::{PromptConfig, Tokenize, TokenizeError};
use crate::seeds::generation_call_seed;
use episode::Episode;
use pool::run_parallel;
use ragen_gym_core::{Env, EnvSpec, Trajectory};

/// Why a rollout failed as a whole (env failures only end their trajectory).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// A prompt could not be encoded.
    #[error("encode a prompt")]
    Tokenize(#[from] TokenizeError),
    /// The generator failed.
    #[error(transparent)]
    Generate(#[from] GenerateError),
}

/// Rollout settings (from the config and the env spec).
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutParams {
    /// Prompt layout.
    pub prompt: PromptConfig,
    /// Turns per trajectory.
    pub max_turn: usize,
    /// Actions kept per answer.
    pub max_actions_per_turn: usize,
    /// Action budget per trajectory.
    pub max_actions_per_traj: usize,
    /// Separator inside `<answer>`.
    pub action_sep: String,
    /// Penalty per bad turn (RAGEN -0.1).
    pub format_penalty: f64,
    /// Prompt token limit.
    pub max_model_len: usize,
    /// Prompts per generation call.
    pub generation_batch_size: usize,
    /// Sampling temperature, top-p, max new tokens; `seed` is the base seed of this rollout.
    pub sampling: GenerationParams,
    /// Metric tag.
    pub tag: String,
    /// The most time one trajectory's env calls may take (`failure.trajectory_wall_s`; `None`:
    /// no limit); past it the trajectory ends as a timeout.
    pub trajectory_wall_budget: Option<std::time::Duration>,
    /// Ask the env's expert before each step and record its advice (`rollout.expert_agreement`;
    /// envs without an expert are not asked).
    pub expert_agreement: bool,
}

impl RolloutParams {
    /// The settings of a rollout of a run on an env with `spec`, sampled at `temperature` with
    /// the rollout's sampler seed `seed`.
    pub fn from_config(cfg: &Config, spec: &EnvSpec, temperature: f64, seed: u64) -> Self {
        Self {
            prompt: PromptConfig::from_config(cfg, spec),
            max_turn: cfg.agent_proxy.max_turn,
            max_actions_per_turn: cfg.agent_proxy.max_actions_per_turn,
            max_actions_per_traj: cfg.max_actions_per_traj(spec),
            action_sep: cfg.agent_proxy.action_sep.clone(),
            format_penalty: cfg.es_manager.format_penalty,
            max_model_len: cfg.rollout.max_model_len,
            generation_batch_size: cfg.rollout.generation_batch_size,
            sampling: GenerationParams {
                temperature,
                top_p: cfg.rollout.top_p,
                max_new_tokens: cfg.rollout.response_length,
                seed,
                stop_at_answer: cfg.rollout.stop_at_answer,
            },
            tag: cfg.env_tag(spec),
            trajectory_wall_budget: cfg.failure.trajectory_wall_budget(),
            expert_agreement: cfg.rollout.expert_agreement,
        }
    }
}

/// A progress report from inside a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloutProgress {
    /// Turn index (0-based).
    pub turn: usize,
    /// Prompts sampled so far in this turn.
    pub generated: usize,
    /// Active envs this turn.
    pub active: usize,
}

/// Run one batch of episodes: `seeds[i] = (group, seed)` for env `i` of the pool; returns the
/// trajectories in that order. `on_progress` is called after every generation call.
pub fn rollout(
    pool: &mut EnvPool,
    seeds: &[(usize, u64)],
    generator: &mut dyn Generator,
    p: &RolloutParams,
    on_progress: &mut dyn FnMut(RolloutProgress),
) -> Result<Vec<Trajectory>, RolloutError> {
    assert!(
        seeds.len() <= pool.len(),
        "more seeds than envs in the pool"
    );
    let (spec, envs) = pool.parts_mut();
    let mut eps: Vec<_> = envs
        .iter_mut()
        .zip(seeds)
        .map(|(env, &(group, seed))| (env, Episode::new(group, seed)))
        .collect();
    run_parallel(&mut eps, |(env, ep)| ep.reset(env.as_mut(), p));
    play(&mut eps, spec, generator, p, on_progress)?;
    Ok(eps
        .into_iter()
        .map(|(_, ep)| ep.into_trajectory(&spec.id, &p.tag))
        .collect())
}

/// Take turns with every running episode until none is left: each round samples the prompts of
/// the running episodes (in calls seeded by the round, [`generate`]), then each episode parses
/// its answer and steps its env, in parallel. An episode stops at `p.max_turn` turns, so one that
/// starts with turns already played (a branch) plays the turns left.
fn play(
    eps: &mut [(&mut Box<dyn Env>, Episode)],
    spec: &EnvSpec,
    generator: &mut dyn Generator,
    p: &RolloutParams,
    on_progress: &mut dyn FnMut(RolloutProgress),
) -> Result<(), RolloutError> {
    let action_names = spec.action_names.as_deref();
    for turn in 0..p.max_turn {
        let t = std::time::Instant::now();
        let (active, prompts) = prompts(eps, generator.tokenizer(), p)?;
        if active.is_empty() {
            break;
        }
        let prompts_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        generator.expect_turn(&prompts);
        let generations = generate(generator, &prompts, p, turn, on_progress)?;
        let generate_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let mut answers: Vec<Option<Generation>> = eps.iter().map(|_| None).collect();
        for (i, g) in active.into_iter().zip(generations) {
            answers[i] = Some(g);
        }
        let mut work: Vec<_> = eps
            .iter_mut()
            .zip(answers)
            .filter_map(|(e, a)| Some((e, a?)))
            .collect();
        run_parallel(&mut work, |((env, ep), answer)| {
            ep.apply(std::mem::take(answer), env.as_mut(), p, action_names)
        });
        // Where a turn's time goes, for `RAGEN_LOG=ragen_gym_starpo::rollout=debug`.
        tracing::debug!(
            turn,
            prompts = prompts.len(),
            prompt_tokens = prompts.iter().map(Vec::len).sum::<usize>(),
            longest = prompts.iter().map(Vec::len).max().unwrap_or(0),
            prompts_s,
            generate_s,
            env_s = t.elapsed().as_secs_f64(),
            "rollout turn"
        );
    }
    Ok(())
}

/// The indices and prompts of the episodes still running; an over-long prompt ends its episode.
fn prompts<E>(
    eps: &mut [(E, Episode)],
    tokenizer: &dyn Tokenize,
    p: &RolloutParams,
) -> Result<(Vec<usize>, Vec<Vec<u32>>), TokenizeError> {
    let (mut active, mut prompts) = (Vec::new(), Vec::new());
    for (i, (_, ep)) in eps.iter_mut().enumerate() {
        if ep.is_running()
            && ep.turns_played() < p.max_turn
            && let Some(ids) = ep.prompt(p, tokenizer)?
        {
            active.push(i);
            prompts.push(ids);
        }
    }
    Ok((active, prompts))
}

/// Sample one answer per prompt of turn `turn`, in calls of `generation_batch_size` prompts,
/// each with its own sampler seed; `on_progress` hears of each call.
fn generate(
    generator: &mut dyn Generator,
    prompts: &[Vec<u32>],
    p: &RolloutParams,
    turn: usize,
    on_progress: &mut dyn FnMut(RolloutProgress),
) -> Result<Vec<Generation>, GenerateError> {
    let mut out = Vec::with_capacity(prompts.len());
    for (c, chunk) in prompts.chunks(p.generation_batch_size.max(1)).enumerate() {
        let params = GenerationParams {
            seed: generation_call_seed(p.sampling.seed, turn, c),
            ..p.sampling
        };
        out.extend(generator.generate(chunk, &params)?);
        on_progress(RolloutProgress {
            turn,
            generated: out.len(),
            active: prompts.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{TokenOrigin, TokenTrace};
    use crate::testing::{Counter, ScriptedGenerator};
    use ragen_gym_core::EnvCallError;

    fn params() -> RolloutParams {
        RolloutParams {
            prompt: PromptConfig {
                system_prompt: "S".into(),
                prefix: "P".into(),
                enable_think: true,
                response_length: 10,
                max_context_window: -1,
            },
            max_turn: 3,
            max_actions_per_turn: 5,
            max_actions_per_traj: 10,
            action_sep: "||".into(),
            format_penalty: -0.1,
            max_model_len: 100_000,
            generation_batch_size: 3,
            sampling: GenerationParams {
                temperature: 1.0,
                top_p: 1.0,
                max_new_tokens: 10,
                seed: 1,
                stop_at_answer: false,
            },
            tag: "Counter".into(),
            trajectory_wall_budget: None,
            expert_agreement: false,
        }
    }

    fn run(
        answer: &str,
        p: &RolloutParams,
        seeds: &[(usize, u64)],
    ) -> (Vec<Trajectory>, ScriptedGenerator) {
        let mut pool = EnvPool::new((0..seeds.len()).map(|_| Counter::boxed()).collect());
        let mut g = ScriptedGenerator::fixed(answer);
        let t = rollout(&mut pool, seeds, &mut g, p, &mut |_| {}).unwrap();
        assert!(t.iter().flat_map(|t| &t.turns).all(|t| t.sampled.is_none()));
        (t, g)
    }

    #[test]
    fn actions_stop_at_first_done() {
        let (t, g) = run(
            " ok</think><answer>inc || INC || Inc</answer>",
            &params(),
            &[(0, 1), (0, 1)],
        );
        assert_eq!(t.len(), 2);
        for x in &t {
            assert_eq!(x.num_actions, 2);
            assert_eq!(x.turns.len(), 1);
            assert_eq!(x.turns[0].actions, vec!["Inc", "Inc"]);
            // every step is recorded with the env's result (what `replay` checks)
            let steps: Vec<(&str, f64, bool)> = x.turns[0]
                .steps
                .iter()
                .map(|s| {
                    let r = s.outcome.as_ref().unwrap();
                    (s.action.as_str(), r.reward, r.terminated)
                })
                .collect();
            assert_eq!(steps, vec![("Inc", 1.0, false), ("Inc", 1.0, true)]);
            assert!(x.success && x.terminated && !x.truncated);
            assert_eq!(x.score(), 2.0);
            assert_eq!(
                x.turns[0].response,
                "<think>ok</think><answer>inc || INC || Inc</answer>"
            );
        }
        // one generation call per turn-batch, both envs in the first turn only
        assert_eq!(g.prompts.len(), 2);
        assert!(g.prompts[0].ends_with("<|im_start|>assistant\n<think>"));
        assert!(g.prompts[0].contains("Actions left: 10."));
    }

    #[test]
    fn sampled_tokens_stay_in_the_history_exactly() {
        // Under constrained decoding the history holds the sampled tokens, not the text
        // re-tokenised (`docs/ragen-semantics.md` §5): the generator's trace spells `y` where
        // its text says `x`, and a later prompt shows the trace. The stored response is the raw
        // text, and each turn keeps its own trace.
        let ids: Vec<u32> = " y</think><answer> Inc </answer>"
            .chars()
            .map(|c| c as u32)
            .collect();
        let trace = TokenTrace {
            origins: vec![TokenOrigin::Forced; ids.len()],
            logprobs: vec![0.0; ids.len()],
            ids,
            end: None,
        };
        let mut pool = EnvPool::new(vec![Counter::boxed()]);
        let sampled = trace.clone();
        let mut g = ScriptedGenerator::new(move |_| Generation {
            text: " x</think><answer> Inc </answer>".into(),
            trace: Some(sampled.clone()),
        });
        let out = rollout(&mut pool, &[(0, 1)], &mut g, &params(), &mut |_| {}).unwrap();
        let t = &out[0];
        assert_eq!(t.turns.len(), 2);
        assert_eq!(
            t.turns[0].response,
            "<think> x</think><answer> Inc </answer>"
        );
        assert_eq!(t.turns[0].actions, vec!["Inc"]);
        assert!(t.turns.iter().all(|x| x.sampled.as_ref() == Some(&trace)));
        assert!(g.prompts[1].contains(
            "<|im_start|>assistant\n<think> y</think><answer> Inc </answer><|im_end|>\n"
        ));
    }

    #[test]
    fn budget_ends_trajectory_as_truncated() {
        let mut p = params();
        p.max_actions_per_traj = 1;
        let (t, _) = run("</think><answer>Inc||Inc</answer>", &p, &[(0, 5)]);
        assert_eq!(t[0].num_actions, 1);
        assert!(t[0].terminated && t[0].truncated && !t[0].success);
    }

    #[test]
    fn bad_format_costs_a_penalty_per_turn() {
        let (t, g) = run("no tags here", &params(), &[(0, 5)]);
        assert_eq!(t[0].turns.len(), 3);
        assert!((t[0].penalty + 0.3).abs() < 1e-12);
        assert_eq!(t[0].num_actions, 0);
        assert!(!t[0].success && t[0].truncated);
        // the history stores the raw text; the reward of a turn without actions prints as 0
        assert!(g.prompts[1].contains(
            "<|im_start|>assistant\n<think>no tags here<|im_end|>\n<|im_start|>user\nReward:\n0\n"
        ));
        // an invalid action name is penalised too, valid ones still run
        let (t, _) = run("</think><answer>Jump || Inc</answer>", &params(), &[(0, 5)]);
        assert_eq!(t[0].turns[0].actions, vec!["Inc"]);
        assert!(t[0].turns[0].format_penalty);
        // two turns of one valid Inc each reach the goal; each turn drew the penalty
        assert_eq!(t[0].turns.len(), 2);
        assert!(t[0].success);
        assert!((t[0].penalty + 0.2).abs() < 1e-12);
        assert!((t[0].score() - 1.8).abs() < 1e-12);
    }

    #[test]
    fn env_error_ends_only_its_trajectory() {
        let (t, _) = run(
            "</think><answer>Inc</answer>",
            &params(),
            &[(0, Counter::FAILING_SEED), (1, 3)],
        );
        assert!(
            t[0].end_reason
                .as_deref()
                .unwrap()
                .contains("panicked: unreachable")
        );
        assert!(!t[0].success && t[0].truncated);
        // the failed step is recorded with its error
        let failed = &t[0].turns[0].steps[0];
        assert_eq!(failed.action, "Inc");
        assert!(failed.outcome.as_ref().unwrap_err().contains("panicked"));
        assert!(t[1].success && t[1].end_reason.is_none());
        assert_eq!(t[1].turns.len(), 2);
    }

    #[test]
    fn over_long_prompt_is_truncated_with_reason() {
        let mut p = params();
        p.max_model_len = 10;
        let (t, g) = run("</think><answer>Inc</answer>", &p, &[(0, 3)]);
        assert!(g.prompts.is_empty());
        assert!(t[0].turns.is_empty() && t[0].truncated);
        assert!(
            t[0].end_reason
                .as_deref()
                .unwrap()
                .contains("exceeds max_model_len 10")
        );
    }

    /// A counter whose expert always advises `Inc`, or fails when `fails` (after `reset`).
    struct Advised {
        inner: Counter,
        fails: bool,
        asked: usize,
    }

    impl Env for Advised {
        fn spec(&self) -> &EnvSpec {
            self.inner.spec()
        }
        fn reset(&mut self, seed: u64) -> Result<ragen_gym_core::ResetResult, EnvCallError> {
            self.inner.reset(seed)
        }
        fn step(&mut self, a: &str) -> Result<ragen_gym_core::StepResult, EnvCallError> {
            self.inner.step(a)
        }
        fn expert_info(&mut self) -> Result<Option<ragen_gym_core::ExpertInfo>, EnvCallError> {
            Ok(Some(ragen_gym_core::ExpertInfo {
                description: "count up".into(),
                optimal: true,
            }))
        }
        fn advise(&mut self) -> Result<ragen_gym_core::Advice, EnvCallError> {
            self.asked += 1;
            if self.fails {
                return Err(EnvCallError::NoExpert {
                    plugin: "test/Counter-v0".into(),
                    reason: "broken on purpose".into(),
                });
            }
            Ok(ragen_gym_core::Advice {
                actions: vec!["Inc".into()],
                success_probability: Some(1.0),
            })
        }
    }

    /// A step's action and the expert's advice before it.
    type StepAdvice = (String, Option<Vec<String>>);

    /// The steps' `(action, expert advice)` of one rollout of `answer` on `env`.
    fn advised_steps(env: Box<dyn Env>, ask: bool, answer: &str) -> (Vec<StepAdvice>, Trajectory) {
        let mut pool = EnvPool::new(vec![env]);
        let mut g = ScriptedGenerator::fixed(answer);
        let p = RolloutParams {
            expert_agreement: ask,
            ..params()
        };
        let t = rollout(&mut pool, &[(0, 1)], &mut g, &p, &mut |_| {})
            .unwrap()
            .remove(0);
        let steps = t
            .turns
            .iter()
            .flat_map(|x| &x.steps)
            .map(|s| (s.action.clone(), s.expert.clone()))
            .collect();
        (steps, t)
    }

    #[test]
    fn the_expert_is_asked_before_each_step_only_where_it_exists_and_is_wanted() {
        let answer = " ok</think><answer>Inc || Stop</answer>";
        let advised = |fails| {
            Box::new(Advised {
                inner: Counter::new(),
                fails,
                asked: 0,
            }) as Box<dyn Env>
        };
        let inc = Some(vec!["Inc".to_string()]);
        // Asked: the advice of the state each step started from, `Inc` both times; the
        // policy's Stop disagrees: 1 of 2 steps agree.
        let (steps, t) = advised_steps(advised(false), true, answer);
        assert_eq!(
            steps,
            vec![("Inc".into(), inc.clone()), ("Stop".into(), inc)]
        );
        let m = crate::metrics::rollout_metrics("val-env", std::slice::from_ref(&t), 0);
        assert_eq!(m["val-env/Counter/expert_agreement"], 0.5);
        // Not wanted, an env without an expert, an expert that fails: no advice, and the same
        // trajectory otherwise (the advice does not change the rollout).
        let plain = |mut x: Trajectory| {
            for turn in &mut x.turns {
                for s in &mut turn.steps {
                    s.expert = None;
                }
            }
            x
        };
        for (env, ask) in [
            (advised(false), false),
            (Counter::boxed(), true),
            (advised(true), true),
        ] {
            let (steps, u) = advised_steps(env, ask, answer);
            assert!(steps.iter().all(|(_, e)| e.is_none()), "{steps:?}");
            assert_eq!(u, plain(t.clone()));
        }
    }
}
