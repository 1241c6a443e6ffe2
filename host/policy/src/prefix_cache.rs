//! Key/value caches kept across sampling calls and shared between rows: prefix caching for
//! multi-turn rollouts (`docs/ragen-semantics.md`, "Prefix sharing in rollouts"), used by
//! [`crate::sample_cached`].
//!
//! The members of a RAGEN env group reset with the same seed, so their first-turn prompts are
//! identical; and each later prompt of a trajectory is its previous prompt, its response, the
//! reward line and the next observation. So:
//! - rows of one call whose prompts start alike get that common part prefilled once, as a shared
//!   **segment** that each row's own segment continues (the idea of vLLM's automatic prefix
//!   caching and SGLang's RadixAttention, Zheng et al. 2023, arXiv 2312.07104);
//! - when a row ends, its segments stay cached as an **entry** (the tokens it fed and their keys
//!   and values), and a later prompt continues the entry with the longest common prefix,
//!   prefilling only the tokens after it (the reward line, the next observation, the template).
//!
//! Prefixes are found by content (longest common token prefix), so a cached entry is only ever
//! reused for exactly the tokens it encodes. A cache belongs to one set of weights: make a new
//! one (or [`PrefixCache::clear`]) after an optimiser step.
//!
//! Entries are kept up to a memory cap; a prompt whose entry was dropped is prefilled whole again
//! (the fallback). A call's own working set (the rows being sampled) is always allocated, as it
//! is without caching. Which entries go first: least recently used, unless the caller said which
//! prompts come next ([`PrefixCache::expect`], a rollout's whole turn before its calls). A turn
//! visits its rows in the same order every turn, a cyclic scan, under which least-recently-used
//! drops exactly the entries the next calls need and, once the entries outgrow the cap, every
//! later prompt is prefilled whole. With the turn's prompts known, the entry needed furthest in
//! the future goes first (Belady's rule, "A study of replacement algorithms for a virtual-storage
//! computer", IBM Systems Journal 5(2), 1966): entries no coming prompt continues (ended
//! episodes), then entries this turn made (needed next turn, the newest last), then the turn's
//! pending entries, the latest needed first.

use crate::config::ModelConfig;

/// Index of a segment in the store.
pub(crate) type SegId = usize;

/// A run of consecutive cached positions continuing `parent`'s first `used` positions.
pub(crate) struct Segment {
    parent: Option<(SegId, usize)>,
    /// Absolute position of the first token.
    start: usize,
    /// The tokens whose keys and values are stored.
    pub(crate) tokens: Vec<u32>,
    /// Per layer: keys (after RoPE) `[len, KV·hd]`.
    pub(crate) k: Vec<Vec<f32>>,
    /// Per layer: values `[len, KV·hd]`.
    pub(crate) v: Vec<Vec<f32>>,
    /// Children plus holders (a live row, an entry).
    refs: usize,
}

impl Segment {
    /// Cached positions.
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Absolute position of the next token.
    pub(crate) fn end(&self) -> usize {
        self.start + self.tokens.len()
    }
}

/// The segments of one model shape.
pub(crate) struct SegStore {
    segs: Vec<Option<Segment>>,
    free: Vec<SegId>,
    layers: usize,
    /// KV heads × head size.
    kvd: usize,
}

impl SegStore {
    fn new(cfg: &ModelConfig) -> Self {
        Self {
            segs: Vec::new(),
            free: Vec::new(),
            layers: cfg.num_hidden_layers,
            kvd: cfg.num_kv_heads() * cfg.head_dim(),
        }
    }

    fn fits(&self, cfg: &ModelConfig) -> bool {
        self.layers == cfg.num_hidden_layers && self.kvd == cfg.num_kv_heads() * cfg.head_dim()
    }

    pub(crate) fn get(&self, id: SegId) -> &Segment {
        self.segs[id].as_ref().expect("live segment")
    }

    pub(crate) fn get_mut(&mut self, id: SegId) -> &mut Segment {
        self.segs[id].as_mut().expect("live segment")
    }

    /// Bytes of one cached position over all layers (keys and values).
    fn bytes_per_token(&self) -> usize {
        2 * self.layers * self.kvd * std::mem::size_of::<f32>()
    }

    /// A new segment held once, continuing `parent`, with room for `reserve` positions.
    fn alloc(&mut self, parent: Option<(SegId, usize)>, reserve: usize) -> SegId {
        let start = match parent {
            Some((p, used)) => {
                let seg = self.get_mut(p);
                seg.refs += 1;
                seg.start + used
            }
            None => 0,
        };
        let kvd = self.kvd;
        let buf = || {
            (0..self.layers)
                .map(|_| Vec::with_capacity(reserve * kvd))
                .collect()
        };
        let seg = Segment {
            parent,
            start,
            tokens: Vec::with_capacity(reserve),
            k: buf(),
            v: buf(),
            refs: 1,
        };
        match self.free.pop() {
            Some(id) => {
                self.segs[id] = Some(seg);
                id
            }
            None => {
                self.segs.push(Some(seg));
                self.segs.len() - 1
            }
        }
    }

    /// Drop one hold on `id`; a segment nobody holds is freed, and its parent released.
    fn release(&mut self, id: SegId) {
        let mut next = Some(id);
        while let Some(id) = next {
            let seg = self.get_mut(id);
            seg.refs -= 1;
            if seg.refs > 0 {
                return;
            }
            next = seg.parent.map(|(p, _)| p);
            self.segs[id] = None;
            self.free.push(id);
        }
    }

    /// Keep the first `len` positions of `id` (which nothing else reads) and room for
    /// `reserve` more.
    fn truncate(&mut self, id: SegId, len: usize, reserve: usize) {
        let kvd = self.kvd;
        let seg = self.get_mut(id);
        seg.tokens.truncate(len);
        seg.tokens.reserve(reserve);
        for buf in seg.k.iter_mut().chain(seg.v.iter_mut()) {
            buf.truncate(len * kvd);
            buf.reserve(reserve * kvd);
        }
    }

    /// The chain of `id`, root first: each segment with the number of its positions read.
    pub(crate) fn chain(&self, id: SegId) -> Vec<(SegId, usize)> {
        let mut out = vec![(id, self.get(id).len())];
        let mut cur = self.get(id).parent;
        while let Some((p, used)) = cur {
            out.push((p, used));
            cur = self.get(p).parent;
        }
        out.reverse();
        out
    }

    /// The segment and the count of its positions that hold the first `x` positions of
    /// `id`'s chain (`x` at most the chain's length; the earliest segment at a boundary).
    fn cut(&self, id: SegId, x: usize) -> (SegId, usize) {
        let mut before = 0;
        for (seg, used) in self.chain(id) {
            if x <= before + used {
                return (seg, x - before);
            }
            before += used;
        }
        unreachable!("cut beyond the chain");
    }

    /// Bytes held by every live segment (allocated capacity).
    fn bytes(&self) -> usize {
        self.segs
            .iter()
            .flatten()
            .map(|s| {
                (s.k.iter().chain(&s.v).map(Vec::capacity).sum::<usize>()) * 4
                    + s.tokens.capacity() * 4
            })
            .sum()
    }
}

/// What [`PrefixCache::expect`] was told of the coming calls.
struct Expected {
    /// The clock when it was told: entries used after this were made or read by those calls.
    since: u64,
    /// For each entry (by leaf) that a coming prompt continues, that prompt's index (the first).
    next_use: std::collections::HashMap<SegId, usize>,
}

/// A finished row's cache, kept for later prompts.
struct Entry {
    leaf: SegId,
    /// Every token of the chain, root first.
    tokens: Vec<u32>,
    /// Clock of the last use (creation or reuse).
    used: u64,
}

/// What a cache did, summed over its calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Prompt tokens of every row of every call.
    pub prompt_tokens: u64,
    /// Prompt tokens that went through the model (the rest came from a cached or shared prefix).
    pub prefilled_tokens: u64,
    /// Prompt tokens continued from an entry of an earlier call.
    pub reused_tokens: u64,
    /// Entries dropped to stay under the memory cap.
    pub evicted_entries: u64,
    /// Most bytes of keys and values held at once.
    pub peak_bytes: usize,
}

/// Key/value caches for [`crate::sample_cached`]: shared prefixes within a call and entries
/// kept across calls, up to a memory cap (see the module docs).
pub struct PrefixCache {
    store: Option<SegStore>,
    entries: Vec<Entry>,
    share: bool,
    max_bytes: usize,
    clock: u64,
    expected: Option<Expected>,
    stats: PrefixCacheStats,
}

/// Shortest common prompt part worth a shared segment of its own.
const MIN_SHARED: usize = 4;

/// How the rows of one call are computed: sequences to prefill, in an order where every shared
/// segment comes before the rows that read it, and each row's own segment.
pub(crate) struct Plan {
    /// (segment, new tokens) to prefill.
    pub(crate) seqs: Vec<(SegId, Vec<u32>)>,
    /// For each row: its own segment and the index of its sequence in `seqs`.
    pub(crate) rows: Vec<(SegId, usize)>,
}

/// Step 4 of [`PrefixCache::plan`]: among the rows without a segment of their own (`rows`),
/// those after the same cached part (`cuts`) share every common start of their remaining prompts
/// (`rest`), as a tree of segments (a radix tree, as in SGLang's RadixAttention): the part all
/// of a set of rows share is one segment, and the rows that share more below it branch off into
/// child segments. A shared part has at least [`MIN_SHARED`] tokens and leaves each row at least
/// one token of its own. The rows' `parent` and `rest` move past their shared parts. Returns the
/// shared segments with their tokens, every parent before its children.
fn share_common_starts(
    store: &mut SegStore,
    cuts: &[Option<(SegId, usize)>],
    rows: &[Option<SegId>],
    rest: &mut [&[u32]],
    parent: &mut [Option<(SegId, usize)>],
) -> Vec<(SegId, Vec<u32>)> {
    let mut seqs = Vec::new();
    let mut by_base = std::collections::BTreeMap::<Option<(SegId, usize)>, Vec<usize>>::new();
    for i in (0..rows.len()).filter(|&i| rows[i].is_none()) {
        by_base.entry(cuts[i]).or_default().push(i);
    }
    for (base, mut members) in by_base {
        members.sort_by(|&a, &b| rest[a].cmp(rest[b]));
        let mut tree = Tree {
            store: &mut *store,
            rest: &mut *rest,
            parent: &mut *parent,
            seqs: &mut seqs,
        };
        tree.share(base, &members);
    }
    seqs
}

/// The state of [`share_common_starts`] while it builds one tree.
struct Tree<'a, 'r> {
    store: &'a mut SegStore,
    rest: &'a mut [&'r [u32]],
    parent: &'a mut [Option<(SegId, usize)>],
    seqs: &'a mut Vec<(SegId, Vec<u32>)>,
}

impl<'r> Tree<'_, 'r> {
    /// Tokens rows `a` and `b` can share: their common prefix, leaving each one token.
    fn shareable(&self, a: usize, b: usize) -> usize {
        let (x, y) = (self.rest[a], self.rest[b]);
        lcp(x, y).min(x.len() - 1).min(y.len() - 1)
    }

    /// Share the common starts of `members` (sorted by their rest), which continue `base`: each
    /// maximal run of neighbours sharing at least [`MIN_SHARED`] tokens gets a segment of the
    /// part the whole run shares (in sorted order, the least shared by neighbours), and the run
    /// is shared again below it.
    fn share(&mut self, base: Option<(SegId, usize)>, members: &[usize]) {
        let mut start = 0;
        while start < members.len() {
            let mut common = usize::MAX;
            let mut end = start + 1;
            while end < members.len() {
                let c = self.shareable(members[end - 1], members[end]);
                if c < MIN_SHARED {
                    break;
                }
                common = common.min(c);
                end += 1;
            }
            if end - start >= 2 {
                let run = &members[start..end];
                let shared = self.rest[run[0]][..common].to_vec();
                let seg = self.store.alloc(base, common);
                for &m in run {
                    let r: &'r [u32] = self.rest[m];
                    self.parent[m] = Some((seg, common));
                    self.rest[m] = &r[common..];
                }
                self.seqs.push((seg, shared));
                self.share(Some((seg, common)), run);
            }
            start = end;
        }
    }
}

/// Length of the common prefix of two token slices.
fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// Sharing on: common prompt parts within a call are prefilled once, and finished rows stay
    /// cached for later calls while their keys and values take at most `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            store: None,
            entries: Vec::new(),
            share: true,
            max_bytes,
            clock: 0,
            expected: None,
            stats: PrefixCacheStats::default(),
        }
    }

    /// Sharing off: every row prefills its whole prompt and nothing is kept.
    pub fn disabled() -> Self {
        Self {
            share: false,
            ..Self::new(0)
        }
    }

    /// Whether prompts share prefixes.
    pub fn shares(&self) -> bool {
        self.share
    }

    /// What the cache did so far.
    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Bytes of keys and values held now.
    pub fn bytes(&self) -> usize {
        self.store.as_ref().map_or(0, SegStore::bytes)
    }

    /// Drop every entry (e.g. after the weights changed).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.expected = None;
        self.store = None;
    }

    /// The prompts of the coming calls, in the order they will be sampled (a rollout's whole
    /// turn): until the next `expect`, entries are dropped furthest-needed first rather than
    /// least recently used (see the module docs). Which tokens are sampled does not change;
    /// only which prompts are prefilled whole when the cap is reached.
    pub fn expect(&mut self, prompts: &[Vec<u32>]) {
        let mut next_use = std::collections::HashMap::new();
        for (j, p) in prompts.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            if let Some((leaf, _)) = self.longest_entry(&p[..p.len() - 1]) {
                next_use.entry(leaf).or_insert(j);
            }
        }
        self.expected = Some(Expected {
            since: self.clock,
            next_use,
        });
    }

    /// The store for a model of shape `cfg` (a cache used with another shape starts over).
    pub(crate) fn store_for(&mut self, cfg: &ModelConfig) -> &mut SegStore {
        if !self.store.as_ref().is_some_and(|s| s.fits(cfg)) {
            self.entries.clear();
            self.store = Some(SegStore::new(cfg));
        }
        self.store.as_mut().expect("store just made")
    }

    pub(crate) fn store_mut(&mut self) -> &mut SegStore {
        self.store.as_mut().expect("plan made the store")
    }

    /// Plan a call's prompts (every prompt non-empty) for a model of shape `cfg`, leaving room
    /// for `max_new` sampled tokens per row. Every row keeps at least its last prompt token to
    /// prefill, so its first logits come from its own sequence.
    pub(crate) fn plan(&mut self, cfg: &ModelConfig, prompts: &[Vec<u32>], max_new: usize) -> Plan {
        self.store_for(cfg);
        self.clock += 1;
        // 1. Per row, the entry with the longest common prefix: its leaf and that length.
        let base: Vec<Option<(SegId, usize)>> = prompts
            .iter()
            .map(|p| self.longest_entry(&p[..p.len() - 1]))
            .collect();
        // 2. Make room: drop unclaimed entries, least recently used first, until the rows fit.
        let per_token = self.store_mut().bytes_per_token();
        let need: usize = prompts
            .iter()
            .zip(&base)
            .map(|(p, b)| (p.len() - b.map_or(0, |b| b.1) + max_new) * per_token)
            .sum();
        let claimed: std::collections::HashSet<SegId> =
            base.iter().flatten().map(|b| b.0).collect();
        self.evict(need, &claimed);
        // 3. Each row continues a segment: its entry's own leaf in place when no other row or
        // segment reads it, else a new segment after the common part.
        let store = self.store.as_mut().expect("store");
        let cuts: Vec<Option<(SegId, usize)>> = base
            .iter()
            .map(|b| b.map(|(leaf, x)| store.cut(leaf, x)))
            .collect();
        let mut in_leaf = std::collections::HashMap::<SegId, usize>::new();
        for (seg, _) in cuts.iter().flatten() {
            *in_leaf.entry(*seg).or_default() += 1;
        }
        let mut rows: Vec<Option<SegId>> = vec![None; prompts.len()];
        let mut rest: Vec<&[u32]> = Vec::with_capacity(prompts.len());
        for (i, p) in prompts.iter().enumerate() {
            let x = base[i].map_or(0, |b| b.1);
            rest.push(&p[x..]);
            if let (Some((leaf, _)), Some((seg, used))) = (base[i], cuts[i])
                && seg == leaf
                && in_leaf[&leaf] == 1
                && store.get(leaf).refs == 1
            {
                // The entry's hold passes to the row.
                store.truncate(leaf, used, p.len() - x + max_new);
                let e = self.entries.iter().position(|e| e.leaf == leaf);
                self.entries.swap_remove(e.expect("the leaf's entry"));
                rows[i] = Some(leaf);
            }
        }
        // 4. Rows after the same cached part whose remaining prompts start alike share that
        // start as a segment of its own (a group's identical first-turn prompts).
        let mut parent: Vec<Option<(SegId, usize)>> = cuts.clone();
        let mut seqs = if self.share {
            share_common_starts(store, &cuts, &rows, &mut rest, &mut parent)
        } else {
            Vec::new()
        };
        // 5. The rows' own segments; then the plan's hold on each shared segment ends (its
        // rows hold it now).
        let shared: Vec<SegId> = seqs.iter().map(|q| q.0).collect();
        let mut out = Vec::with_capacity(prompts.len());
        for (i, r) in rows.iter().enumerate() {
            let seg = r.unwrap_or_else(|| store.alloc(parent[i], rest[i].len() + max_new));
            out.push((seg, seqs.len()));
            seqs.push((seg, rest[i].to_vec()));
        }
        for seg in shared {
            store.get_mut(seg).refs -= 1;
        }
        for e in &mut self.entries {
            if claimed.contains(&e.leaf) {
                e.used = self.clock;
            }
        }
        if let Some(x) = self.expected.as_mut() {
            // Claimed: no longer pending (a leaf passed to a row comes back as a new entry).
            x.next_use.retain(|leaf, _| !claimed.contains(leaf));
        }
        let s = &mut self.stats;
        s.prompt_tokens += prompts.iter().map(|p| p.len() as u64).sum::<u64>();
        s.prefilled_tokens += seqs.iter().map(|q| q.1.len() as u64).sum::<u64>();
        s.reused_tokens += base.iter().flatten().map(|b| b.1 as u64).sum::<u64>();
        s.peak_bytes = s.peak_bytes.max(store.bytes());
        Plan { seqs, rows: out }
    }

    /// The entry whose tokens share the longest prefix with `prompt`: its leaf and that length.
    fn longest_entry(&self, prompt: &[u32]) -> Option<(SegId, usize)> {
        if !self.share {
            return None;
        }
        let mut best: Option<(SegId, usize)> = None;
        for e in &self.entries {
            let x = lcp(prompt, &e.tokens);
            if x > best.map_or(0, |b| b.1) {
                best = Some((e.leaf, x));
            }
        }
        best
    }

    /// Drop entries not in `keep` until `need` more bytes fit under the cap (or no such entry is
    /// left): least recently used first, or, after [`PrefixCache::expect`], furthest needed first.
    fn evict(&mut self, need: usize, keep: &std::collections::HashSet<SegId>) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        while store.bytes() + need > self.max_bytes {
            let candidates = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| !keep.contains(&e.leaf));
            let victim = match &self.expected {
                None => candidates.min_by_key(|(_, e)| e.used),
                Some(x) => candidates.max_by_key(|(_, e)| eviction_rank(x, e)),
            }
            .map(|(i, _)| i);
            let Some(i) = victim else {
                return;
            };
            let e = self.entries.swap_remove(i);
            if let Some(x) = self.expected.as_mut() {
                x.next_use.remove(&e.leaf);
            }
            store.release(e.leaf);
            self.stats.evicted_entries += 1;
        }
    }

    /// The rows of a call ended: with sharing on, each row's segments stay as an entry (then
    /// the cap is enforced); else they are freed.
    pub(crate) fn finish(&mut self, leaves: &[SegId]) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        self.stats.peak_bytes = self.stats.peak_bytes.max(store.bytes());
        for &leaf in leaves {
            if self.share && self.max_bytes > 0 {
                let mut tokens = Vec::new();
                for (seg, used) in store.chain(leaf) {
                    tokens.extend_from_slice(&store.get(seg).tokens[..used]);
                }
                self.entries.push(Entry {
                    leaf,
                    tokens,
                    used: self.clock,
                });
            } else {
                store.release(leaf);
            }
        }
        self.evict(0, &Default::default());
    }
}

/// The order in which entries leave once the coming prompts are known (the largest first):
/// entries no coming prompt continues and older than the announcement (ended episodes), oldest
/// first; then entries made or read since (needed after every pending one), newest first; then
/// pending entries, the one needed latest first.
fn eviction_rank(x: &Expected, e: &Entry) -> (u8, u64) {
    match x.next_use.get(&e.leaf) {
        Some(&j) => (0, j as u64),
        None if e.used > x.since => (1, e.used),
        None => (2, u64::MAX - e.used),
    }
}

#[cfg(test)]
pub(crate) mod tests;
