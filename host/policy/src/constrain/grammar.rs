//! The answer grammar ([`ActionGrammar`]) and its byte automaton: `Name ( sep Name )*
//! </answer>` with `min_actions` to `max_actions` names, each name optionally after one space,
//! read byte by byte over a trie of the (case-folded) names and determinised on demand.

use std::collections::HashMap;

use super::CLOSE;
use crate::{PolicyError, Result};

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
    /// At least this many names before `</answer>`: 1 lets the model stop after any name, as
    /// RAGEN's free answers do; `max_actions` makes every answer use its whole turn.
    pub min_actions: usize,
    /// Accept any ASCII letter case of a name, as the host maps names case-insensitively.
    /// Non-ASCII letters must match exactly.
    pub case_insensitive: bool,
}

impl ActionGrammar {
    /// A byte as the grammar compares it: ASCII-lowercased when case-insensitive.
    pub(super) fn fold(&self, b: u8) -> u8 {
        if self.case_insensitive {
            b.to_ascii_lowercase()
        } else {
            b
        }
    }

    /// The action names, folded.
    pub(super) fn folded_names(&self) -> Vec<Vec<u8>> {
        self.names
            .iter()
            .map(|n| n.bytes().map(|b| self.fold(b)).collect())
            .collect()
    }
}

/// Refuse a grammar the automaton cannot represent or that reads ambiguously.
pub(super) fn check_grammar(g: &ActionGrammar) -> Result<()> {
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
    if !(1..=g.max_actions).contains(&g.min_actions) {
        return bad(format!(
            "min_actions {} is outside 1..=max_actions_per_turn ({})",
            g.min_actions, g.max_actions
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
pub(super) struct Automaton {
    trie: NameTrie,
    sep: Vec<u8>,
    max: u8,
    min: u8,
    fold: bool,
    states: Vec<Vec<Pos>>,
    ids: HashMap<Vec<Pos>, u32>,
    memo: HashMap<(u32, u8), Option<u32>>,
}

impl Automaton {
    /// The automaton of a grammar that passed [`check_grammar`]; no state is built yet.
    pub(super) fn new(grammar: &ActionGrammar) -> Self {
        Self {
            trie: NameTrie::new(&grammar.folded_names()),
            sep: grammar.separator.as_bytes().to_vec(),
            max: grammar.max_actions as u8,
            min: grammar.min_actions as u8,
            fold: grammar.case_insensitive,
            states: Vec::new(),
            ids: HashMap::new(),
            memo: HashMap::new(),
        }
    }

    /// The state right after `<answer>` (before the first name).
    pub(super) fn answer_start(&mut self) -> u32 {
        self.start(Pos::Slot(0))
    }

    /// Number of deterministic states built so far.
    pub(super) fn num_states(&self) -> usize {
        self.states.len()
    }

    /// Whether `state` holds a complete answer.
    pub(super) fn accepts(&self, state: u32) -> bool {
        self.states[state as usize].contains(&Pos::Accept)
    }

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

    /// The state after byte `b` from `state`, or `None` where the answer cannot continue.
    pub(super) fn step(&mut self, state: u32, b: u8) -> Option<u32> {
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
                    if k >= self.min && b == CLOSE[0] {
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
