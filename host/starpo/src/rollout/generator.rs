//! The language model as the rollout sees it: [`Generator`] samples one completion per prompt
//! under [`GenerationParams`]. The candle policy implements it in `policy_adapter.rs`, an
//! OpenAI-compatible API model in the CLI, and the fakes of `testing.rs` in tests.

use crate::prompt::{TokenTrace, Tokenize};

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
    /// constraint (`docs/ragen-semantics.md` §5, "Constrained action decoding"): the turn then
    /// keeps them instead of re-tokenising the text.
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
    /// The prompts of a whole turn, before the turn's calls to [`Generator::generate`] take
    /// them in order: a hint for a cache (`PrefixCache::expect`); by default ignored.
    fn expect_turn(&mut self, _prompts: &[Vec<u32>]) {}
}
