//! The env state manager and the multi-turn rollout (`docs/ragen-semantics.md` §1 and §2; RAGEN
//! `ragen/llm_agent/es_manager.py`, `ragen/llm_agent/agent_proxy.py::LLMAgentProxy.rollout`).
//!
//! `env_groups x group_size` envs; group members reset with the same seed. Each turn the prompts
//! of all active envs are sampled in batches, the answers parsed, and the envs stepped in
//! parallel; finished envs leave the batch. A plugin trap or env error ends only that trajectory.

use crate::config::Config;
use crate::prompt::{
    ParsedResponse, PromptConfig, TokenTrace, Tokenize, TokenizeError, TurnView, build_messages,
    forced_prefix, map_actions, parse_response, turn_views,
};
use crate::seeds::generation_call_seed;
use ragen_gym_core::{Env, EnvCallError, EnvSpec, Step, Trajectory, Turn};

/// Settings of one generation call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerationParams {
    /// Softmax temperature (0 = greedy).
    pub temperature: f64,
    /// Nucleus mass (1 = off).
    pub top_p: f64,
    /// Most new tokens.
    pub max_new_tokens: usize,
    /// Seed of this call's sampler.
    pub seed: u64,
    /// Stop at the first `</answer>`.
    pub stop_at_answer: bool,
}

/// Why a generator failed.
#[derive(Debug, thiserror::Error)]
#[error("sample {prompts} completions")]
pub struct GenerateError {
    /// Prompts in the failed call.
    pub prompts: usize,
    /// The model's own error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Generation {
    /// The decoded new text, special tokens skipped.
    pub text: String,
    /// The exact tokens and how each was produced, when the generator decoded under an action
    /// constraint (#9): the trajectory then keeps them instead of re-tokenising the text.
    pub trace: Option<TokenTrace>,
}

impl Generation {
    /// A completion known only as text (free decoding: RAGEN re-tokenises it).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            trace: None,
        }
    }
}

/// The language model as the rollout sees it.
pub trait Generator {
    /// Its tokenizer (prompts are encoded with it).
    fn tokenizer(&self) -> &dyn Tokenize;
    /// Sample one completion per prompt (token ids of the full ChatML prompt, ending with the
    /// forced prefix).
    fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        params: &GenerationParams,
    ) -> Result<Vec<Generation>, GenerateError>;
}

/// What a rollout produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RolloutOutput {
    /// The trajectories, one per seed, in order.
    pub trajectories: Vec<Trajectory>,
    /// Per trajectory, the exact tokens of each turn's response when the generator reported them
    /// (constrained decoding, #9); empty otherwise.
    pub traces: Vec<Vec<TokenTrace>>,
}

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

/// A set of env instances for one batch shape.
pub struct EnvPool {
    envs: Vec<Box<dyn Env>>,
    spec: EnvSpec,
}

/// Builds one env instance (a sandboxed plugin or a native env).
pub type EnvFactory = Box<dyn Fn() -> Result<Box<dyn Env>, EnvCallError>>;

impl EnvPool {
    /// `n` fresh instances from `make_env`.
    pub fn from_factory(make_env: &EnvFactory, n: usize) -> Result<Self, EnvCallError> {
        let envs = (0..n).map(|_| make_env()).collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(envs))
    }

    /// Wrap `n` env instances (one per trajectory). Panics if `envs` is empty.
    pub fn new(envs: Vec<Box<dyn Env>>) -> Self {
        let spec = envs
            .first()
            .expect("an env pool needs at least one env")
            .spec()
            .clone();
        Self { envs, spec }
    }

    /// The env spec.
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Number of envs.
    pub fn len(&self) -> usize {
        self.envs.len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }
}

struct Episode {
    group: usize,
    seed: u64,
    turns: Vec<Turn>,
    state: String,
    num_actions: usize,
    done: bool,
    terminated: bool,
    truncated: bool,
    success: bool,
    penalty: f64,
    end_reason: Option<String>,
    /// The exact tokens of each turn's response (constrained decoding), else empty.
    traces: Vec<TokenTrace>,
}

impl Episode {
    fn views(&self, max_actions_per_traj: usize) -> Vec<TurnView> {
        let mut v = turn_views(&self.turns);
        for (view, trace) in v.iter_mut().zip(&self.traces) {
            view.sampled = Some(trace.clone());
        }
        let actions_left = max_actions_per_traj.saturating_sub(self.num_actions);
        v.push(TurnView {
            state: self.state.clone(),
            actions_left,
            response: None,
            sampled: None,
            reward: None,
        });
        v
    }

    fn end(&mut self, reason: String) {
        self.done = true;
        self.terminated = false;
        self.truncated = true;
        self.success = false;
        self.end_reason = Some(reason);
    }
}

fn run_parallel<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Sync) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len())
        .max(1);
    let chunk = items.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for c in items.chunks_mut(chunk) {
            let f = &f;
            s.spawn(move || c.iter_mut().for_each(f));
        }
    });
}

/// Run one batch of episodes: `seeds[i] = (group, seed)` for env `i` of the pool.
/// `on_progress` is called after every generation call.
pub fn rollout(
    pool: &mut EnvPool,
    seeds: &[(usize, u64)],
    generator: &mut dyn Generator,
    p: &RolloutParams,
    on_progress: &mut dyn FnMut(RolloutProgress),
) -> Result<RolloutOutput, RolloutError> {
    assert!(
        seeds.len() <= pool.envs.len(),
        "more seeds than envs in the pool"
    );
    let action_names = pool.spec.action_names.clone();
    let mut eps: Vec<(&mut Box<dyn Env>, Episode)> = pool
        .envs
        .iter_mut()
        .zip(seeds)
        .map(|(env, &(group, seed))| {
            (
                env,
                Episode {
                    group,
                    seed,
                    turns: Vec::new(),
                    state: String::new(),
                    num_actions: 0,
                    done: false,
                    terminated: false,
                    truncated: false,
                    success: false,
                    penalty: 0.0,
                    end_reason: None,
                    traces: Vec::new(),
                },
            )
        })
        .collect();

    run_parallel(&mut eps, |(env, ep)| match env.reset(ep.seed) {
        Ok(r) => ep.state = r.observation,
        Err(e) => ep.end(format!("reset failed: {e}")),
    });

    for turn in 0..p.max_turn {
        // Prompts of the active envs; over-long prompts end their trajectory.
        let mut active = Vec::new();
        let mut prompts = Vec::new();
        for (i, (_, ep)) in eps.iter_mut().enumerate() {
            if ep.done {
                continue;
            }
            let messages = build_messages(&p.prompt, &ep.views(p.max_actions_per_traj));
            let prompt = generator
                .tokenizer()
                .encode_prompt(&messages, forced_prefix(p.prompt.enable_think))?;
            let n = prompt.len();
            if n > p.max_model_len {
                ep.end(format!(
                    "prompt of {n} tokens exceeds max_model_len {}",
                    p.max_model_len
                ));
                continue;
            }
            active.push(i);
            prompts.push(prompt);
        }
        if active.is_empty() {
            break;
        }
        let mut generations = Vec::with_capacity(prompts.len());
        for (c, chunk) in prompts.chunks(p.generation_batch_size.max(1)).enumerate() {
            let params = GenerationParams {
                seed: generation_call_seed(p.sampling.seed, turn, c),
                ..p.sampling
            };
            let out = generator.generate(chunk, &params)?;
            generations.extend(out);
            on_progress(RolloutProgress {
                turn,
                generated: generations.len(),
                active: active.len(),
            });
        }
        let mut plans: Vec<Option<(String, ParsedResponse)>> = vec![None; eps.len()];
        for (&i, generation) in active.iter().zip(generations) {
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
            if let Some(trace) = generation.trace {
                // The history keeps the sampled tokens, so it shows the raw text they spell.
                eps[i].1.traces.push(trace);
                plans[i] = Some((
                    full.clone(),
                    ParsedResponse {
                        cleaned: full,
                        ..parsed
                    },
                ));
            } else {
                plans[i] = Some((full, parsed));
            }
        }
        let mut work: Vec<_> = eps
            .iter_mut()
            .zip(plans)
            .filter_map(|(e, plan)| plan.map(|pl| (e, pl)))
            .collect();
        run_parallel(&mut work, |((env, ep), (_full, parsed))| {
            let (valid, dropped) = map_actions(&parsed.actions, action_names.as_deref());
            let bad_format = parsed.answer.is_none() || parsed.actions.is_empty() || dropped;
            if bad_format {
                ep.penalty += p.format_penalty;
            }
            let budget = p.max_actions_per_traj.saturating_sub(ep.num_actions);
            let mut t = Turn {
                observation: ep.state.clone(),
                actions_left: budget,
                response: parsed.cleaned.clone(),
                think: parsed.think.clone(),
                answer: parsed.answer.clone(),
                actions: Vec::new(),
                env_reward: 0.0,
                action_is_valid: !bad_format,
                action_is_effective: false,
                format_penalty: bad_format,
                info: Vec::new(),
                steps: Vec::new(),
            };
            for a in valid.into_iter().take(budget) {
                match env.step(&a) {
                    Ok(r) => {
                        ep.num_actions += 1;
                        t.steps.push(Step {
                            action: a.clone(),
                            outcome: Ok(r.clone()),
                        });
                        t.actions.push(a);
                        t.env_reward += r.reward;
                        t.action_is_effective |= r.action_is_effective;
                        // The env's own verdict counts too (text-action envs such as WebShop
                        // judge validity themselves; `docs/ragen-semantics.md` §2).
                        t.action_is_valid &= r.action_is_valid;
                        t.info = r.info;
                        ep.state = r.observation;
                        if r.terminated || r.truncated {
                            ep.done = true;
                            ep.terminated = true;
                            ep.success = r.success;
                            ep.truncated = !r.success;
                            break;
                        }
                    }
                    Err(e) => {
                        t.steps.push(Step {
                            action: a,
                            outcome: Err(e.to_string()),
                        });
                        ep.end(format!("step failed: {e}"));
                        break;
                    }
                }
            }
            if !ep.done && ep.num_actions >= p.max_actions_per_traj {
                ep.done = true;
                ep.terminated = true;
                ep.truncated = true;
            }
            ep.turns.push(t);
        });
    }

    let traces = eps
        .iter_mut()
        .map(|(_, ep)| std::mem::take(&mut ep.traces))
        .collect();
    let trajectories = eps
        .into_iter()
        .map(|(_, ep)| Trajectory {
            env_id: pool.spec.id.clone(),
            tag: p.tag.clone(),
            group: ep.group,
            seed: ep.seed,
            turns: ep.turns,
            final_observation: ep.state,
            num_actions: ep.num_actions,
            terminated: ep.terminated,
            truncated: ep.truncated || !ep.terminated,
            success: ep.terminated && ep.success,
            penalty: ep.penalty,
            extra_reward: 0.0,
            end_reason: ep.end_reason,
        })
        .collect();
    Ok(RolloutOutput {
        trajectories,
        traces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::CharTokenizer;
    use ragen_gym_core::{EnvCallError, PluginFailure, PluginFailureKind, ResetResult, StepResult};

    /// Counter env: `Inc` adds 1 (reward 1), done with success at 2; `Stop` ends without success.
    /// Seed 99 makes `step` fail like a trapped plugin.
    struct Counter {
        spec: EnvSpec,
        n: u32,
        seed: u64,
    }

    impl Counter {
        fn boxed() -> Box<dyn Env> {
            Box::new(Counter {
                spec: EnvSpec {
                    id: "test/Counter-v0".into(),
                    version: "0.1.0".into(),
                    description: "count".into(),
                    instruction: "Count to two.".into(),
                    action_names: Some(vec!["Inc".into(), "Stop".into()]),
                    symbol_legend: None,
                    max_episode_steps: 10,
                    reward_threshold: None,
                    default_config: "{}".into(),
                },
                n: 0,
                seed: 0,
            })
        }
    }

    impl Env for Counter {
        fn spec(&self) -> &EnvSpec {
            &self.spec
        }
        fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
            self.n = 0;
            self.seed = seed;
            Ok(ResetResult {
                observation: "0".into(),
                info: vec![],
            })
        }
        fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
            if self.seed == 99 {
                return Err(EnvCallError::Plugin(PluginFailure {
                    kind: PluginFailureKind::Panic,
                    plugin_id: "test/Counter-v0".into(),
                    version: "0.1.0".into(),
                    message: "unreachable".into(),
                }));
            }
            let stop = action == "Stop";
            if !stop {
                self.n += 1;
            }
            Ok(StepResult {
                observation: self.n.to_string(),
                reward: if stop { 0.0 } else { 1.0 },
                terminated: stop || self.n >= 2,
                truncated: false,
                action_is_valid: true,
                action_is_effective: !stop,
                success: self.n >= 2,
                info: vec![],
            })
        }
    }

    /// Answers every prompt with a fixed text and records the prompts (decoded back to text).
    struct Scripted {
        answer: String,
        prompts: Vec<String>,
    }

    impl Generator for Scripted {
        fn tokenizer(&self) -> &dyn Tokenize {
            &CharTokenizer
        }
        fn generate(
            &mut self,
            prompts: &[Vec<u32>],
            _: &GenerationParams,
        ) -> Result<Vec<Generation>, GenerateError> {
            for p in prompts {
                self.prompts.push(CharTokenizer::decode(p));
            }
            Ok(prompts
                .iter()
                .map(|_| Generation::text(self.answer.clone()))
                .collect())
        }
    }

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
        }
    }

    fn run(answer: &str, p: &RolloutParams, seeds: &[(usize, u64)]) -> (Vec<Trajectory>, Scripted) {
        let mut pool = EnvPool::new((0..seeds.len()).map(|_| Counter::boxed()).collect());
        let mut g = Scripted {
            answer: answer.into(),
            prompts: vec![],
        };
        let t = rollout(&mut pool, seeds, &mut g, p, &mut |_| {}).unwrap();
        assert!(t.traces.iter().all(Vec::is_empty));
        (t.trajectories, g)
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

    /// Answers with a trace whose ids spell `sampled` (char ids), while the decoded text is
    /// `text`: a later prompt shows which one the history kept.
    struct Traced {
        text: &'static str,
        sampled: &'static str,
        prompts: Vec<String>,
    }

    impl Generator for Traced {
        fn tokenizer(&self) -> &dyn Tokenize {
            &CharTokenizer
        }
        fn generate(
            &mut self,
            prompts: &[Vec<u32>],
            _: &GenerationParams,
        ) -> Result<Vec<Generation>, GenerateError> {
            self.prompts
                .extend(prompts.iter().map(|p| CharTokenizer::decode(p)));
            let ids: Vec<u32> = self.sampled.chars().map(|c| c as u32).collect();
            let trace = TokenTrace {
                origins: vec![crate::prompt::TokenOrigin::Forced; ids.len()],
                logprobs: vec![0.0; ids.len()],
                ids,
                end: None,
            };
            Ok(prompts
                .iter()
                .map(|_| Generation {
                    text: self.text.into(),
                    trace: Some(trace.clone()),
                })
                .collect())
        }
    }

    #[test]
    fn sampled_tokens_stay_in_the_history_exactly() {
        // #9: under constrained decoding the history holds the sampled tokens, not the text
        // re-tokenised; the stored response is the raw text, and the rollout returns the traces.
        let mut pool = EnvPool::new(vec![Counter::boxed()]);
        let mut g = Traced {
            text: " x</think><answer> Inc </answer>",
            sampled: " y</think><answer> Inc </answer>",
            prompts: vec![],
        };
        let out = rollout(&mut pool, &[(0, 1)], &mut g, &params(), &mut |_| {}).unwrap();
        let t = &out.trajectories[0];
        assert_eq!(t.turns.len(), 2);
        assert_eq!(
            t.turns[0].response,
            "<think> x</think><answer> Inc </answer>"
        );
        assert_eq!(t.turns[0].actions, vec!["Inc"]);
        assert_eq!(out.traces[0].len(), 2);
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
            &[(0, 99), (1, 3)],
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
}
