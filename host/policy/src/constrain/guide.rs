//! What the sampler calls per token: a [`Guide`] per row walks the phases of a response (free
//! thought, host-forced text, the answer's automaton states) and says what may come [`Next`];
//! [`Constraint::replay`] runs the same guide over a finished response for the scorer.

use std::sync::Arc;

use super::index::ActionIndex;
use super::{Constraint, FORCED, OPEN, THINK_CLOSE, Thinking, TokenKind};
use crate::{PolicyError, Result};

impl Constraint {
    /// The kinds of `tokens` (a response, starting right after the prompt's forced `<answer>`
    /// or `<think>`) as the constraint produces them with an unlimited budget: the mask with
    /// which to score a response the host re-tokenised (RAGEN trains on the cleaned response,
    /// `ctx_manager._parse_response`). Thinking on, `</think>` is found in the text and any
    /// tokens spelling the `<answer>` after it are forced; the think budget is not replayed
    /// (host-forced `</think>` reads as free text). Tokens after the end-of-turn token are free.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] naming the first token the grammar does not allow.
    pub fn replay(&self, tokens: &[u32]) -> Result<Vec<TokenKind>> {
        let mut g = Guide::new(self);
        g.max_think = None;
        let mut kinds = Vec::with_capacity(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            let kind = g.kind_of(t).ok_or_else(|| {
                PolicyError::arg(
                    "tokens",
                    format!("token {t} at position {i} is not allowed by the action grammar"),
                )
            })?;
            g.advance(t);
            kinds.push(kind);
        }
        Ok(kinds)
    }
}

/// What the sampler may emit next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Anything.
    Free,
    /// Exactly this token.
    Forced(u32),
    /// One of these (sorted, at least two).
    Choice(Arc<[u32]>),
}

impl Next {
    /// The kind recorded for the token emitted at this step.
    pub fn kind(&self) -> TokenKind {
        match self {
            Next::Free => TokenKind::Free,
            Next::Forced(_) => TokenKind::Forced,
            Next::Choice(s) => TokenKind::Choice(s.clone()),
        }
    }
}

#[derive(Debug, Clone)]
enum Phase {
    /// Free thought; `tail` holds the last bytes, to spot `</think>`.
    Think { tail: Vec<u8>, free: usize },
    /// Host-forced text: `FORCED[at..]` is still to come, then the answer.
    Forcing { at: usize },
    /// Inside the answer, at an automaton state.
    Answer(u32),
    /// Nothing constrained any more: the answer and end-of-turn token were emitted, or the
    /// free text after `</think>` cannot lead to `<answer>`.
    Done,
}

/// The per-row decoding state machine of a [`Constraint`].
#[derive(Debug, Clone)]
pub struct Guide<'a> {
    index: &'a ActionIndex,
    max_think: Option<usize>,
    phase: Phase,
}

impl<'a> Guide<'a> {
    /// A fresh guide at the start of a response.
    pub fn new(c: &'a Constraint) -> Self {
        let (phase, max_think) = match c.thinking {
            Thinking::Off => (Phase::Answer(c.index.answer_start), None),
            Thinking::On { max_think_tokens } => (
                Phase::Think {
                    tail: Vec::new(),
                    free: 0,
                },
                max_think_tokens,
            ),
        };
        Self {
            index: &c.index,
            max_think,
            phase,
        }
    }

    /// What may be emitted with `remaining` tokens left (this one included). Thinking on, the
    /// thought is closed by force once the think budget is spent, or once only the forced
    /// `</think><answer>`, the shortest answer and the end-of-turn token still fit.
    pub fn next(&mut self, remaining: usize) -> Next {
        let ix = self.index;
        if let Phase::Think { free, .. } = self.phase {
            let reserve = ix.forced[0].len() + ix.min_answer_tokens() + 1;
            if self.max_think.is_some_and(|m| free >= m) || remaining <= reserve {
                self.phase = Phase::Forcing { at: 0 };
            }
        }
        match self.phase {
            Phase::Think { .. } | Phase::Done => Next::Free,
            Phase::Forcing { at } => Next::Forced(ix.forced[at][0]),
            Phase::Answer(s) => {
                if ix.states[s as usize].accepting {
                    return Next::Forced(ix.eot);
                }
                let set = ix.allowed(s, remaining);
                if set.len() == 1 {
                    Next::Forced(set[0])
                } else {
                    Next::Choice(set)
                }
            }
        }
    }

    /// The kind `token` has here with an unlimited budget, or `None` when it is not allowed.
    fn kind_of(&self, token: u32) -> Option<TokenKind> {
        let ix = self.index;
        match self.phase {
            Phase::Think { .. } | Phase::Done => Some(TokenKind::Free),
            Phase::Forcing { at } => {
                let b = &ix.bytes[token as usize];
                (!b.is_empty() && FORCED[at..].starts_with(b)).then_some(TokenKind::Forced)
            }
            Phase::Answer(s) if ix.states[s as usize].accepting => {
                (token == ix.eot).then_some(TokenKind::Forced)
            }
            Phase::Answer(s) => {
                let set = &ix.states[s as usize].allowed;
                set.binary_search(&token).ok()?;
                Some(if set.len() == 1 {
                    TokenKind::Forced
                } else {
                    TokenKind::Choice(set.clone())
                })
            }
        }
    }

    /// Record the emitted token (one that the last [`Guide::next`] allowed).
    pub fn advance(&mut self, token: u32) {
        let ix = self.index;
        let bytes = &ix.bytes[token as usize];
        self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Think { mut tail, free } => {
                tail.extend_from_slice(bytes);
                match find(&tail, THINK_CLOSE) {
                    Some(at) => after_think(&tail[at + THINK_CLOSE.len()..]),
                    None => {
                        let keep = tail.len().saturating_sub(THINK_CLOSE.len());
                        tail.drain(..keep);
                        Phase::Think {
                            tail,
                            free: free + 1,
                        }
                    }
                }
            }
            Phase::Forcing { at } => {
                let at = at + bytes.len();
                if at >= FORCED.len() {
                    Phase::Answer(ix.answer_start)
                } else {
                    Phase::Forcing { at }
                }
            }
            Phase::Answer(s) if ix.states[s as usize].accepting => Phase::Done,
            Phase::Answer(s) => ix.next_state(s, token).map_or(Phase::Done, Phase::Answer),
            Phase::Done => Phase::Done,
        };
    }
}

/// The phase after `</think>` and `rest` (the remainder of the token that closed the thought):
/// the rest of `<answer>` is forced. RAGEN's parser allows whitespace in between
/// (`</think>\s*<answer>`); text that cannot lead to `<answer>`, or an answer begun in the
/// same token, leaves the response free.
fn after_think(rest: &[u8]) -> Phase {
    let ws = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let open = &rest[ws..];
    if open.len() < OPEN.len() && OPEN.starts_with(open) {
        Phase::Forcing {
            at: THINK_CLOSE.len() + open.len(),
        }
    } else {
        Phase::Done
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `logits` with every id outside `allowed` set to minus infinity (the logits processor of
/// guided decoding: applied before temperature, top-k and top-p).
pub fn mask_logits(logits: &[f32], allowed: &[u32]) -> Vec<f32> {
    let mut out = vec![f32::NEG_INFINITY; logits.len()];
    for &t in allowed {
        out[t as usize] = logits[t as usize];
    }
    out
}
