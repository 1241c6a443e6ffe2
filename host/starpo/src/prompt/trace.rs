//! The exact tokens of a response sampled under constrained action decoding (#9), and how each
//! was produced. The rollout keeps them, so that later prompts of the trajectory and its
//! training sequence hold exactly the sampled tokens (not the response re-tokenised), and the
//! trainer scores every token under the restriction it was sampled with
//! (`docs/ragen-semantics.md` §5, "Constrained action decoding").

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

/// Counts of sampled tokens by origin, for `rollout/constrained_token_frac` and
/// `rollout/forced_token_frac`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OriginCounts {
    /// All sampled tokens.
    pub total: usize,
    /// Forced ones.
    pub forced: usize,
    /// Constrained choices.
    pub choice: usize,
}

impl OriginCounts {
    /// Add the tokens of `trace`.
    pub fn add(&mut self, trace: &TokenTrace) {
        for o in trace.sampled() {
            self.total += 1;
            match o {
                TokenOrigin::Free => {}
                TokenOrigin::Forced => self.forced += 1,
                TokenOrigin::Choice(_) => self.choice += 1,
            }
        }
    }

    /// `(constrained choices, forced)` as fractions of the sampled tokens (0 when none).
    pub fn fractions(&self) -> (f64, f64) {
        let n = self.total.max(1) as f64;
        (self.choice as f64 / n, self.forced as f64 / n)
    }
}
