//! Fakes for tests (the unit tests, and `tests/all` through the `testing` feature): a generator
//! that answers without a model, over the [`CharTokenizer`], and a small counting env.

use crate::prompt::{CharTokenizer, Tokenize};
use crate::rollout::{GenerateError, Generation, GenerationParams, Generator};
use ragen_gym_core::{
    Env, EnvCallError, EnvSpec, PluginFailure, PluginFailureKind, ResetResult, StepResult,
};

/// Answers the `k`-th prompt it is given (0-based, counted over all calls) with `script(k)`,
/// and keeps every prompt, decoded back to text.
pub struct ScriptedGenerator {
    script: Box<dyn FnMut(usize) -> Generation>,
    answered: usize,
    /// The prompts so far, in order.
    pub prompts: Vec<String>,
}

impl ScriptedGenerator {
    /// A generator that answers prompt `k` with `script(k)`.
    pub fn new(script: impl FnMut(usize) -> Generation + 'static) -> Self {
        Self {
            script: Box::new(script),
            answered: 0,
            prompts: Vec::new(),
        }
    }

    /// A generator that answers every prompt with `answer` (the text after the forced `<think>`
    /// or `<answer>`).
    pub fn fixed(answer: impl Into<String>) -> Self {
        let answer = answer.into();
        Self::new(move |_| Generation::text(answer.clone()))
    }
}

impl Generator for ScriptedGenerator {
    fn tokenizer(&self) -> &dyn Tokenize {
        &CharTokenizer
    }

    fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        _: &GenerationParams,
    ) -> Result<Vec<Generation>, GenerateError> {
        let mut out = Vec::with_capacity(prompts.len());
        for p in prompts {
            self.prompts.push(CharTokenizer::decode(p));
            out.push((self.script)(self.answered));
            self.answered += 1;
        }
        Ok(out)
    }
}

/// A counting env (`test/Counter-v0`, actions `Inc` and `Stop`): `Inc` adds 1 with reward 1
/// and succeeds at 2; `Stop` ends without success (reward 0). Reset with
/// [`Counter::FAILING_SEED`], every `step` fails like a panicking plugin.
#[derive(Debug, Clone)]
pub struct Counter {
    spec: EnvSpec,
    n: u32,
    seed: u64,
}

impl Counter {
    /// The seed after which `step` fails with a plugin panic (`panicked: unreachable`).
    pub const FAILING_SEED: u64 = 99;

    /// A fresh counter.
    pub fn new() -> Self {
        Self {
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
        }
    }

    /// A fresh counter, boxed for an env pool.
    pub fn boxed() -> Box<dyn Env> {
        Box::new(Self::new())
    }
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
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
        if self.seed == Self::FAILING_SEED {
            return Err(EnvCallError::Plugin(PluginFailure {
                kind: PluginFailureKind::Panic,
                plugin_id: self.spec.id.clone(),
                version: self.spec.version.clone(),
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

/// A finished trajectory of env group `group`, reset with `seed`, with `turns` turns of one
/// `Inc` each (reward 1), not successful.
pub fn trajectory(group: usize, seed: u64, turns: usize) -> ragen_gym_core::Trajectory {
    let turn = ragen_gym_core::Turn {
        observation: "0".into(),
        actions_left: 10,
        response: "<answer>Inc</answer>".into(),
        think: None,
        answer: Some("Inc".into()),
        actions: vec!["Inc".into()],
        env_reward: 1.0,
        action_is_valid: true,
        action_is_effective: true,
        format_penalty: false,
        info: vec![],
        steps: vec![],
        sampled: None,
    };
    ragen_gym_core::Trajectory {
        env_id: "test/Counter-v0".into(),
        tag: "Counter".into(),
        group,
        seed,
        turns: vec![turn; turns],
        final_observation: turns.to_string(),
        num_actions: turns,
        terminated: false,
        truncated: true,
        success: false,
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    }
}
