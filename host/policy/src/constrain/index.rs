//! [`ActionIndex`]: the answer automaton walked over one tokenizer's vocabulary, once per
//! (action grammar, tokenizer): the tokens allowed in each automaton state, the state after each,
//! and the fewest tokens from each state to a complete answer (the per-state token index of
//! outlines, Willard & Louf, arXiv 2307.09702, §3).

use std::sync::Arc;

use super::grammar::{ActionGrammar, Automaton, check_grammar};
use super::{CLOSE, FORCED, OPEN, THINK_CLOSE};
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// The vocabulary as a trie: token byte strings sorted, so every prefix is a contiguous range.
struct Vocab {
    /// (bytes, id), sorted by bytes; special tokens and tokens without a byte form are left out.
    sorted: Vec<(Vec<u8>, u32)>,
    /// Bytes of each id (empty for special tokens).
    bytes: Vec<Vec<u8>>,
}

impl Vocab {
    /// The byte spelling of every token ([`Tokenizer::token_bytes`]).
    fn new(tokenizer: &Tokenizer) -> Self {
        let n = tokenizer.vocab_size();
        let mut bytes = vec![Vec::new(); n];
        let mut sorted = Vec::new();
        for id in 0..n as u32 {
            if let Some(b) = tokenizer.token_bytes(id) {
                bytes[id as usize] = b.clone();
                sorted.push((b, id));
            }
        }
        sorted.sort_unstable();
        Self { sorted, bytes }
    }

    /// Every `(token, state after it)` from `state`: a depth-first walk of the vocabulary trie
    /// in step with the automaton, pruned where the automaton dies.
    fn moves(&self, a: &mut Automaton, state: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut stack = vec![(0usize, self.sorted.len(), 0usize, state)];
        while let Some((lo, hi, depth, st)) = stack.pop() {
            let mut i = lo;
            while i < hi && self.sorted[i].0.len() == depth {
                if depth > 0 {
                    out.push((self.sorted[i].1, st));
                }
                i += 1;
            }
            while i < hi {
                let b = self.sorted[i].0[depth];
                let j = i + self.sorted[i..hi].partition_point(|e| e.0[depth] == b);
                if let Some(next) = a.step(st, b) {
                    stack.push((i, j, depth + 1, next));
                }
                i = j;
            }
        }
        out.sort_unstable();
        out
    }

    /// Whether some token sequence spells `target` (compared after `fold`).
    fn spells(&self, target: &[u8], fold: impl Fn(u8) -> u8) -> bool {
        let mut reach = vec![false; target.len() + 1];
        reach[0] = true;
        for start in 0..target.len() {
            if !reach[start] {
                continue;
            }
            let mut cands: Vec<usize> = (0..self.sorted.len()).collect();
            for (d, &want) in target[start..].iter().enumerate() {
                // Tokens that spell `target[start..=start + d]` so far (folded).
                cands.retain(|&i| {
                    let b = &self.sorted[i].0;
                    b.len() > d && fold(b[d]) == want
                });
                if cands.is_empty() {
                    break;
                }
                if cands.iter().any(|&i| self.sorted[i].0.len() == d + 1) {
                    reach[start + d + 1] = true;
                }
            }
        }
        reach[target.len()]
    }
}
/// Per-state token moves of the answer automaton over one tokenizer's vocabulary, with the
/// fewest tokens from each state to a complete answer.
pub(super) struct StateMoves {
    /// Sorted allowed ids (only moves to states from which an answer can still complete).
    pub(super) allowed: Arc<[u32]>,
    /// State after each allowed id.
    next: Vec<u32>,
    /// Fewest tokens to a complete answer (`u32::MAX`: none).
    dist: u32,
    /// The answer is complete here: only the end-of-turn token follows.
    pub(super) accepting: bool,
}

/// The grammar's automaton and the vocabulary tokens allowed in each of its states, built once
/// per (action grammar, tokenizer).
pub struct ActionIndex {
    pub(super) states: Vec<StateMoves>,
    /// State right after `<answer>`.
    pub(super) answer_start: u32,
    /// Token bytes by id, for spotting `</think>` in free text.
    pub(super) bytes: Vec<Vec<u8>>,
    /// The end-of-turn token that follows `</answer>`.
    pub(super) eot: u32,
    /// Canonical tokens of each suffix `FORCED[i..]` (`i < FORCED.len()`).
    pub(super) forced: Vec<Vec<u32>>,
    grammar: ActionGrammar,
}

impl std::fmt::Debug for ActionIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionIndex")
            .field("grammar", &self.grammar)
            .field("states", &self.states.len())
            .finish()
    }
}

impl ActionIndex {
    /// Build the index.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] for an empty name list, an empty or blank name, a name
    /// with surrounding whitespace or containing the separator or `</answer>`, an empty
    /// separator, `max_actions` outside 1..=255 or `min_actions` outside 1..=`max_actions`;
    /// [`PolicyError::UnspellableAction`] naming an action the vocabulary cannot spell;
    /// [`PolicyError::Tokenizer`] when the vocabulary cannot spell the answer tags, or decodes
    /// tokens differently alone than in sequence.
    pub fn new(grammar: &ActionGrammar, tokenizer: &Tokenizer) -> Result<Self> {
        check_grammar(grammar)?;
        let vocab = Vocab::new(tokenizer);
        check_spellable(&vocab, grammar)?;
        let mut automaton = Automaton::new(grammar);
        let answer_start = automaton.answer_start();
        // Walking the vocabulary from a state may build new states: walk until none is left.
        let mut moves = Vec::new();
        while moves.len() < automaton.num_states() {
            let s = moves.len() as u32;
            moves.push(vocab.moves(&mut automaton, s));
        }
        let accepting: Vec<bool> = (0..moves.len() as u32)
            .map(|s| automaton.accepts(s))
            .collect();
        let dist = steps_to_accept(&moves, &accepting);
        if dist[answer_start as usize] == u32::MAX {
            return Err(PolicyError::tokenizer(
                "the vocabulary cannot spell any complete answer of the action grammar",
            ));
        }
        let mut index = Self {
            states: live_moves(moves, &dist, &accepting),
            answer_start,
            bytes: vocab.bytes,
            eot: tokenizer.im_end_id(),
            forced: Vec::new(),
            grammar: grammar.clone(),
        };
        for i in 0..FORCED.len() {
            let rest = std::str::from_utf8(&FORCED[i..]).expect("ascii");
            let ids = tokenizer.encode(rest)?;
            index.check_spelling(&ids, &FORCED[i..], tokenizer)?;
            index.forced.push(ids);
        }
        Ok(index)
    }

    /// Whether `ids` spell `text` both token by token and as decoded by the tokenizer (the
    /// byte reading of each token must not depend on its neighbours).
    fn check_spelling(&self, ids: &[u32], text: &[u8], tokenizer: &Tokenizer) -> Result<()> {
        let joined: Vec<u8> = ids
            .iter()
            .flat_map(|&i| self.bytes[i as usize].iter().copied())
            .collect();
        let decoded = tokenizer.decode(ids, false)?;
        if joined != text || decoded.as_bytes() != text {
            return Err(PolicyError::tokenizer(format!(
                "tokens {ids:?} read as {:?} alone and {decoded:?} together, not {:?}; \
                 constrained decoding needs a byte-level vocabulary",
                String::from_utf8_lossy(&joined),
                String::from_utf8_lossy(text)
            )));
        }
        Ok(())
    }

    /// The grammar this index was built for.
    pub fn grammar(&self) -> &ActionGrammar {
        &self.grammar
    }

    /// Number of automaton states.
    pub fn num_states(&self) -> usize {
        self.states.len()
    }

    /// The tokens allowed right after `<answer>` (any budget).
    pub fn first_tokens(&self) -> &[u32] {
        &self.states[self.answer_start as usize].allowed
    }

    /// Fewest tokens that complete an answer after `<answer>`, excluding the end-of-turn token.
    pub fn min_answer_tokens(&self) -> usize {
        self.states[self.answer_start as usize].dist as usize
    }

    /// The tokens allowed at `state` with `remaining` tokens left (this one included): those
    /// after which a complete answer and the end-of-turn token still fit, or every live one
    /// when none fits.
    pub(super) fn allowed(&self, state: u32, remaining: usize) -> Arc<[u32]> {
        let s = &self.states[state as usize];
        let budget = remaining.saturating_sub(2);
        let fits = |n: &u32| (self.states[*n as usize].dist as usize) <= budget;
        if s.next.iter().all(fits) || !s.next.iter().any(fits) {
            return s.allowed.clone();
        }
        s.allowed
            .iter()
            .zip(&s.next)
            .filter(|(_, n)| fits(n))
            .map(|(t, _)| *t)
            .collect()
    }

    /// The state after `token` at `state`, or `None` when the token is not allowed there.
    pub(super) fn next_state(&self, state: u32, token: u32) -> Option<u32> {
        let s = &self.states[state as usize];
        s.allowed.binary_search(&token).ok().map(|i| s.next[i])
    }
}

/// Refuse a vocabulary that cannot spell the answer tags or an action name (compared as the
/// grammar folds letter case).
fn check_spellable(vocab: &Vocab, grammar: &ActionGrammar) -> Result<()> {
    for tag in [OPEN, CLOSE, THINK_CLOSE] {
        if !vocab.spells(tag, |b| b) {
            return Err(PolicyError::tokenizer(format!(
                "the vocabulary cannot spell {:?}",
                String::from_utf8_lossy(tag)
            )));
        }
    }
    for (name, folded) in grammar.names.iter().zip(grammar.folded_names()) {
        if !vocab.spells(&folded, |b| grammar.fold(b)) {
            return Err(PolicyError::UnspellableAction { name: name.clone() });
        }
    }
    Ok(())
}

/// The fewest tokens from each state to an accepting one (`u32::MAX`: none), a fixed point of
/// `dist[s] = min over moves (s -> n) of dist[n] + 1`, with `dist = 0` where accepting.
fn steps_to_accept(moves: &[Vec<(u32, u32)>], accepting: &[bool]) -> Vec<u32> {
    let mut dist: Vec<u32> = accepting
        .iter()
        .map(|&acc| if acc { 0 } else { u32::MAX })
        .collect();
    loop {
        let mut changed = false;
        for (s, m) in moves.iter().enumerate() {
            for &(_, next) in m {
                let d = dist[next as usize].saturating_add(1);
                if d < dist[s] {
                    dist[s] = d;
                    changed = true;
                }
            }
        }
        if !changed {
            return dist;
        }
    }
}

/// Each state's moves, keeping only those to states from which an answer can still complete.
fn live_moves(moves: Vec<Vec<(u32, u32)>>, dist: &[u32], accepting: &[bool]) -> Vec<StateMoves> {
    moves
        .into_iter()
        .enumerate()
        .map(|(s, m)| {
            let live: Vec<(u32, u32)> = m
                .into_iter()
                .filter(|&(_, n)| dist[n as usize] != u32::MAX)
                .collect();
            StateMoves {
                allowed: live.iter().map(|m| m.0).collect(),
                next: live.iter().map(|m| m.1).collect(),
                dist: dist[s],
                accepting: accepting[s],
            }
        })
        .collect()
}
