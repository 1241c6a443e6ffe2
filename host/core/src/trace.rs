//! The record of a constrained response: [`TokenTrace`], its exact sampled tokens, and
//! [`TokenOrigin`], how each was produced (`docs/ragen-semantics.md` §5, "Constrained action
//! decoding"). The rollout keeps them on the [`Turn`](crate::Turn) they answer, so that later
//! prompts of the trajectory and its training sequence hold exactly the sampled tokens (not the
//! response re-tokenised), and the trainer scores every token under the restriction it was
//! sampled with.

use std::sync::Arc;

/// How the sampler produced one token (the candle-free form of the policy's `TokenKind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// Sampled from the model's full distribution.
    Free,
    /// The only token the grammar or the host allowed: probability 1, nothing to learn.
    Forced,
    /// Sampled from the distribution renormalised over this sorted set of allowed ids.
    Choice(Arc<[u32]>),
}

impl TokenOrigin {
    /// Whether the policy chose this token (it carries a gradient): free or a constrained choice.
    pub fn is_chosen(&self) -> bool {
        !matches!(self, TokenOrigin::Forced)
    }
}

/// One response as sampled.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenTrace {
    /// The sampled ids after the forced prefix, up to (not including) a sampled end-of-turn
    /// token (`<|im_end|>`).
    pub ids: Vec<u32>,
    /// How each of `ids` was produced.
    pub origins: Vec<TokenOrigin>,
    /// How the end-of-turn token was produced when the model sampled it; `None` when sampling
    /// stopped otherwise (length, stop string) and the chat template appends it.
    pub end: Option<TokenOrigin>,
    /// The sampler's log-prob of each sampled token (`ids`, then the end-of-turn token when
    /// sampled), under the same restriction: 0 for a forced token. The trainer compares them
    /// with its own old log-probs (`rollout/logprob_diff_max`).
    pub logprobs: Vec<f32>,
}

impl TokenTrace {
    /// Every sampled token's origin, the end-of-turn token included when it was sampled.
    pub fn sampled(&self) -> impl Iterator<Item = &TokenOrigin> {
        self.origins.iter().chain(&self.end)
    }
}
