//! Constrained action decoding (`docs/ragen-semantics.md` §5, "Constrained action decoding"):
//! once a response reaches its answer, only token sequences that spell
//! `Name ( sep Name )* </answer>` (at most `max_actions` names), then the end-of-turn token, may be
//! sampled, and training scores those tokens under the same restriction.
//!
//! This is guided decoding as vLLM offers it (`guided_decoding` in the sampling parameters, run
//! as a logits processor that masks the tokens a grammar forbids before temperature and
//! top-k/top-p; its outlines backend precomputes, per automaton state, which vocabulary tokens
//! keep the text inside the grammar: Willard & Louf, "Efficient Guided Generation for Large
//! Language Models", arXiv 2307.09702, §3). Here the grammar is a byte-level automaton over the
//! env's action names, and [`ActionIndex`] walks a trie of the vocabulary's byte strings from
//! every automaton state once, so every tokenization of a name (with or without a leading space,
//! in any letter case the host's case-insensitive mapping accepts) is allowed.
//!
//! To stay on-policy, the sampler records for each generated token whether it was free, forced
//! (the only allowed token: log-prob 0, no gradient) or a constrained choice (normalised over its
//! allowed set), and [`crate::score`] applies the same restriction to old and new log-probs and
//! to the entropy. Normalising an LLM's token probabilities over the valid actions only is
//! TWOSOME's policy (Tan et al., "True Knowledge Comes from Practice: Aligning LLMs with Embodied
//! Environments via Reinforcement Learning", arXiv 2401.14151, §4.1); here the normalisation is
//! per token, over the tokens that continue a valid answer.
//!
//! Thinking off, the constraint starts right after the forced `<answer>` that ends the prompt.
//! Thinking on, the text is free until the model writes `</think>` (the host then forces the
//! rest of `<answer>`), or until the think budget runs out (the host then forces
//! `</think><answer>`).
//!
//! - `constrain/grammar.rs`: the answer grammar ([`ActionGrammar`]) and its byte automaton.
//! - `constrain/index.rs`: the automaton walked over a tokenizer's vocabulary ([`ActionIndex`]).
//! - `constrain/guide.rs`: the per-row runtime the sampler calls per token ([`Guide`], [`Next`],
//!   [`mask_logits`]) and its replay over a finished response ([`Constraint::replay`]).

mod grammar;
mod guide;
mod index;

pub use grammar::ActionGrammar;
pub use guide::{Guide, Next, mask_logits};
pub use index::ActionIndex;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

const OPEN: &[u8] = b"<answer>";
const CLOSE: &[u8] = b"</answer>";
const THINK_CLOSE: &[u8] = b"</think>";
/// The text the host may force: `</think>` when the think budget runs out, then `<answer>`.
const FORCED: &[u8] = b"</think><answer>";

/// How a generated token was produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "KindRepr", into = "KindRepr")]
pub enum TokenKind {
    /// Sampled from the full distribution.
    Free,
    /// The only allowed token: log-prob 0, entropy 0, no gradient.
    Forced,
    /// Sampled from the distribution renormalised over this sorted set of allowed ids.
    Choice(Arc<[u32]>),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KindRepr {
    Free,
    Forced,
    Choice(Vec<u32>),
}

impl From<KindRepr> for TokenKind {
    fn from(k: KindRepr) -> Self {
        match k {
            KindRepr::Free => Self::Free,
            KindRepr::Forced => Self::Forced,
            KindRepr::Choice(v) => Self::Choice(v.into()),
        }
    }
}

impl From<TokenKind> for KindRepr {
    fn from(k: TokenKind) -> Self {
        match k {
            TokenKind::Free => Self::Free,
            TokenKind::Forced => Self::Forced,
            TokenKind::Choice(v) => Self::Choice(v.to_vec()),
        }
    }
}

/// Where the constraint starts: right after the prompt's `<answer>`, or after a free thought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// The prompt ends with the forced `<answer>`: constrained from the first token.
    Off,
    /// The prompt ends with `<think>`: free until `</think>`, or until `max_think_tokens` free
    /// tokens (`None`: only the response budget) when `</think><answer>` is forced.
    On {
        /// Free tokens allowed before the host closes the thought.
        max_think_tokens: Option<usize>,
    },
}

/// A constraint for [`crate::sample_constrained`]: the index and where it starts. Its rows are
/// run by [`Guide`]s.
#[derive(Debug, Clone)]
pub struct Constraint {
    /// The answer grammar over the tokenizer's vocabulary.
    pub index: Arc<ActionIndex>,
    /// Thinking on or off.
    pub thinking: Thinking,
}

#[cfg(test)]
mod tests;
