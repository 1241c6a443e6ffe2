//! Constrained action decoding (#9): once a response reaches its answer, only token sequences
//! that spell `Name ( sep Name )* </answer>` (at most `max_actions` names), then the end-of-turn
//! token, may be sampled, and training scores those tokens under the same restriction.
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

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

const OPEN: &[u8] = b"<answer>";
const CLOSE: &[u8] = b"</answer>";
const THINK_CLOSE: &[u8] = b"</think>";

/// The answer grammar of an env with a fixed action set (RAGEN `ctx_manager._parse_response`
/// with `es_manager._extract_map_valid_actions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionGrammar {
    /// The env's action names.
    pub names: Vec<String>,
    /// The action separator (RAGEN `agent_proxy.action_sep`, `||`).
    pub separator: String,
    /// At most this many names per answer (RAGEN `agent_proxy.max_actions_per_turn`).
    pub max_actions: usize,
    /// Accept any ASCII letter case of a name, as the host maps names case-insensitively.
    /// Non-ASCII letters must match exactly.
    pub case_insensitive: bool,
}

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

/// One position of the byte automaton (a nondeterministic state; sets of them are the
/// deterministic states). `k` counts the names read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Pos {
    /// Before a name; one optional space.
    Slot(u8),
    /// Inside a name, at a node of the name trie.
    Name(u8, u32),
    /// After `k` names; `true` once the optional space is read.
    After(u8, bool),
    /// `i` bytes of the separator read after `k` names.
    Sep(u8, u8),
    /// `i` bytes of `</answer>` read.
    Close(u8),
    /// The answer is complete.
    Accept,
}

/// A trie of the (folded) action names.
#[derive(Debug, Default)]
struct NameTrie {
    children: Vec<Vec<(u8, u32)>>,
    terminal: Vec<bool>,
}

impl NameTrie {
    fn new(names: &[Vec<u8>]) -> Self {
        let mut t = Self {
            children: vec![Vec::new()],
            terminal: vec![false],
        };
        for n in names {
            let mut node = 0usize;
            for &b in n {
                node = match t.children[node].iter().find(|(c, _)| *c == b) {
                    Some(&(_, next)) => next as usize,
                    None => {
                        let next = t.children.len();
                        t.children[node].push((b, next as u32));
                        t.children.push(Vec::new());
                        t.terminal.push(false);
                        next
                    }
                };
            }
            t.terminal[node] = true;
        }
        t
    }
}

/// The byte automaton of the answer grammar, determinised on demand.
struct Automaton {
    trie: NameTrie,
    sep: Vec<u8>,
    max: u8,
    fold: bool,
    states: Vec<Vec<Pos>>,
    ids: HashMap<Vec<Pos>, u32>,
    memo: HashMap<(u32, u8), Option<u32>>,
}

impl Automaton {
    fn fold(&self, b: u8) -> u8 {
        if self.fold { b.to_ascii_lowercase() } else { b }
    }

    fn closure(&self, p: Pos, out: &mut Vec<Pos>) {
        out.push(p);
        match p {
            Pos::Slot(k) => out.push(Pos::Name(k, 0)),
            Pos::Name(k, n) if self.trie.terminal[n as usize] => {
                out.push(Pos::After(k + 1, false));
            }
            _ => {}
        }
    }

    fn intern(&mut self, mut set: Vec<Pos>) -> Option<u32> {
        if set.is_empty() {
            return None;
        }
        set.sort_unstable();
        set.dedup();
        if let Some(&id) = self.ids.get(&set) {
            return Some(id);
        }
        let id = self.states.len() as u32;
        self.ids.insert(set.clone(), id);
        self.states.push(set);
        Some(id)
    }

    fn start(&mut self, p: Pos) -> u32 {
        let mut set = Vec::new();
        self.closure(p, &mut set);
        self.intern(set).expect("a closure is never empty")
    }

    fn step(&mut self, state: u32, b: u8) -> Option<u32> {
        if let Some(&s) = self.memo.get(&(state, b)) {
            return s;
        }
        let mut out = Vec::new();
        for &p in &self.states[state as usize] {
            match p {
                Pos::Slot(k) if b == b' ' => out.push(Pos::Name(k, 0)),
                Pos::Name(k, n) => {
                    let fb = self.fold(b);
                    if let Some(&(_, c)) = self.trie.children[n as usize]
                        .iter()
                        .find(|(x, _)| *x == fb)
                    {
                        self.closure(Pos::Name(k, c), &mut out);
                    }
                }
                Pos::After(k, spaced) => {
                    if b == b' ' && !spaced {
                        out.push(Pos::After(k, true));
                    }
                    if k < self.max && b == self.sep[0] {
                        if self.sep.len() == 1 {
                            self.closure(Pos::Slot(k), &mut out);
                        } else {
                            out.push(Pos::Sep(k, 1));
                        }
                    }
                    if b == CLOSE[0] {
                        out.push(Pos::Close(1));
                    }
                }
                Pos::Sep(k, i) if b == self.sep[i as usize] => {
                    if i as usize + 1 == self.sep.len() {
                        self.closure(Pos::Slot(k), &mut out);
                    } else {
                        out.push(Pos::Sep(k, i + 1));
                    }
                }
                Pos::Close(i) if b == CLOSE[i as usize] => {
                    if i as usize + 1 == CLOSE.len() {
                        out.push(Pos::Accept);
                    } else {
                        out.push(Pos::Close(i + 1));
                    }
                }
                _ => {}
            }
        }
        let s = self.intern(out);
        self.memo.insert((state, b), s);
        s
    }
}

/// The vocabulary as a trie: token byte strings sorted, so every prefix is a contiguous range.
struct Vocab {
    /// (bytes, id), sorted by bytes; special tokens and tokens without a byte form are left out.
    sorted: Vec<(Vec<u8>, u32)>,
    /// Bytes of each id (empty for special tokens).
    bytes: Vec<Vec<u8>>,
}

impl Vocab {
    fn new(tokenizer: &Tokenizer) -> Self {
        let inner = tokenizer.inner();
        let n = tokenizer.vocab_size();
        let special: std::collections::HashSet<u32> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        let byte_level = matches!(
            inner.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        );
        let unicode_bytes = byte_level.then(gpt2_char_bytes);
        let mut bytes = vec![Vec::new(); n];
        let mut sorted = Vec::new();
        for id in 0..n as u32 {
            if special.contains(&id) {
                continue;
            }
            let b = match &unicode_bytes {
                // Byte-level BPE: invert the GPT-2 byte-to-character table, so tokens holding
                // part of a UTF-8 character keep their exact bytes.
                Some(map) => inner.id_to_token(id).and_then(|t| {
                    t.chars()
                        .map(|c| map.get(&c).copied())
                        .collect::<Option<Vec<u8>>>()
                }),
                None => tokenizer
                    .decode(&[id], false)
                    .ok()
                    .filter(|s| !s.contains('\u{FFFD}'))
                    .map(String::into_bytes),
            };
            if let Some(b) = b.filter(|b| !b.is_empty()) {
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

/// GPT-2's byte-to-character table inverted: printable Latin-1 bytes stand for themselves, and
/// the other 68 bytes, in order, for U+0100 onwards (openai/gpt-2 `src/encoder.py::bytes_to_unicode`,
/// the table of every byte-level BPE vocabulary).
fn gpt2_char_bytes() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("U+0100..U+0143 are characters")
        };
        map.insert(c, b);
    }
    map
}

/// Per-state token moves of the answer automaton over one tokenizer's vocabulary, with the
/// fewest tokens from each state to a complete answer.
struct StateMoves {
    /// Sorted allowed ids (only moves to states from which an answer can still complete).
    allowed: Arc<[u32]>,
    /// State after each allowed id.
    next: Vec<u32>,
    /// Fewest tokens to a complete answer (`u32::MAX`: none).
    dist: u32,
    /// The answer is complete here: only the end-of-turn token follows.
    accepting: bool,
}

/// The grammar's automaton and the vocabulary tokens allowed in each of its states, built once
/// per (action grammar, tokenizer).
pub struct ActionIndex {
    states: Vec<StateMoves>,
    /// State right after `<answer>`.
    answer_start: u32,
    /// Token bytes by id, for spotting `</think>` in free text.
    bytes: Vec<Vec<u8>>,
    /// The end-of-turn token that follows `</answer>`.
    eot: u32,
    /// Canonical tokens of each suffix `FORCED[i..]` (`i < FORCED.len()`).
    forced: Vec<Vec<u32>>,
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
    /// separator or `max_actions` outside 1..=255; [`PolicyError::UnspellableAction`] naming an
    /// action the vocabulary cannot spell; [`PolicyError::Tokenizer`] when the vocabulary cannot
    /// spell the answer tags, or decodes tokens differently alone than in sequence.
    pub fn new(grammar: &ActionGrammar, tokenizer: &Tokenizer) -> Result<Self> {
        check_grammar(grammar)?;
        let vocab = Vocab::new(tokenizer);
        let fold = |b: u8| {
            if grammar.case_insensitive {
                b.to_ascii_lowercase()
            } else {
                b
            }
        };
        for tag in [OPEN, CLOSE, THINK_CLOSE] {
            if !vocab.spells(tag, |b| b) {
                return Err(PolicyError::tokenizer(format!(
                    "the vocabulary cannot spell {:?}",
                    String::from_utf8_lossy(tag)
                )));
            }
        }
        let folded: Vec<Vec<u8>> = grammar
            .names
            .iter()
            .map(|n| n.bytes().map(fold).collect())
            .collect();
        for (name, f) in grammar.names.iter().zip(&folded) {
            if !vocab.spells(f, fold) {
                return Err(PolicyError::UnspellableAction { name: name.clone() });
            }
        }
        let mut a = Automaton {
            trie: NameTrie::new(&folded),
            sep: grammar.separator.as_bytes().to_vec(),
            max: grammar.max_actions as u8,
            fold: grammar.case_insensitive,
            states: Vec::new(),
            ids: HashMap::new(),
            memo: HashMap::new(),
        };
        let answer_start = a.start(Pos::Slot(0));
        let mut moves = Vec::new();
        while moves.len() < a.states.len() {
            let s = moves.len() as u32;
            moves.push(vocab.moves(&mut a, s));
        }
        let accepting: Vec<bool> = a.states.iter().map(|s| s.contains(&Pos::Accept)).collect();
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
                break;
            }
        }
        if dist[answer_start as usize] == u32::MAX {
            return Err(PolicyError::tokenizer(
                "the vocabulary cannot spell any complete answer of the action grammar",
            ));
        }
        let states = moves
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
            .collect();
        let mut index = Self {
            states,
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
    fn allowed(&self, state: u32, remaining: usize) -> Arc<[u32]> {
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

    fn next_state(&self, state: u32, token: u32) -> Option<u32> {
        let s = &self.states[state as usize];
        s.allowed.binary_search(&token).ok().map(|i| s.next[i])
    }
}

fn check_grammar(g: &ActionGrammar) -> Result<()> {
    let bad = |reason: String| Err(PolicyError::arg("action grammar", reason));
    if g.names.is_empty() {
        return bad("no action names".into());
    }
    if g.separator.trim().is_empty() {
        return bad("the action separator is empty or blank".into());
    }
    if !(1..=255).contains(&g.max_actions) {
        return bad(format!(
            "max_actions_per_turn {} is outside 1..=255",
            g.max_actions
        ));
    }
    for n in &g.names {
        if n.trim().is_empty() || n.trim() != n {
            return bad(format!(
                "action name {n:?} is empty or has surrounding whitespace"
            ));
        }
        if n.contains(&g.separator) || n.contains("</answer>") {
            return bad(format!(
                "action name {n:?} contains the separator {:?} or </answer>",
                g.separator
            ));
        }
    }
    Ok(())
}

/// Where the constraint starts (#9).
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

/// A constraint for [`crate::sample_constrained`]: the index and where it starts.
#[derive(Debug, Clone)]
pub struct Constraint {
    /// The answer grammar over the tokenizer's vocabulary.
    pub index: Arc<ActionIndex>,
    /// Thinking on or off.
    pub thinking: Thinking,
}

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

/// The text the host may force: `</think>` when the think budget runs out, then `<answer>`.
const FORCED: &[u8] = b"</think><answer>";

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

#[cfg(test)]
mod tests;
