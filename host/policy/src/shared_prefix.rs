//! The layout of shared-prefix training: a batch's sequences merged into one token tree, so that
//! each distinct prefix (a group's prompt, the first turn that several trajectories share, the
//! start of the system prompt every group shares) is computed once in the forward and once in the
//! backward. This is Prefix Grouper (Liu et al. 2025, "Prefix Grouper: Efficient GRPO Training
//! through Shared-Prefix Forward", arXiv 2506.05433) generalised from one shared prompt per group
//! to the whole prefix tree, as the sampler's segment tree does ([`crate::prefix_cache`]).
//!
//! The hidden state at a token depends only on the tokens up to it (causal attention), so every
//! sequence that starts with the same tokens has the same hidden states there: one node per
//! distinct prefix holds them. Each node is computed once ([`crate::LlamaModel`]'s shared forward,
//! `model/shared.rs`); a node's keys and values are read by every node below it, so in the
//! backward the dK and dV of a shared prompt are the sum over the sequences that read it, which is
//! what the per-sequence computation gives too.
//!
//! The tree is cut into *segments*: maximal chains of nodes without a branch. A segment's queries
//! attend to the keys of its ancestor segments (all of them) and to its own keys causally. The
//! segments are bucketed by shape into a few dense attention calls
//! ([`crate::ops::attention`] over gathered K/V), so attention costs about what the per-sequence
//! path's costs for the same queries, and the shared prompt's queries are computed once.

use std::collections::HashMap;
use std::sync::Arc;

use crate::token_batch::TokenBatch;

/// Additive mask value of a key a query may not read (as in `model/mask.rs`).
const MASK_VALUE: f32 = -1e9;

/// A padding cell of [`PrefixTree::node_of`].
pub(crate) const NO_NODE: u32 = u32::MAX;

/// One dense attention call over gathered queries and keys: `rows` segments, each padded to
/// `tq` queries and `tk` keys.
#[derive(Debug, Clone)]
pub(crate) struct AttentionCall {
    pub(crate) rows: usize,
    pub(crate) tq: usize,
    pub(crate) tk: usize,
    /// `[rows · tq]` query nodes (node 0 at padding, whose output is never read).
    pub(crate) queries: Vec<u32>,
    /// `[rows · tk]` key nodes (node 0 at padding, masked).
    pub(crate) keys: Vec<u32>,
    /// `[rows, tq, tk]` additive mask.
    pub(crate) bias: Arc<Vec<f32>>,
}

/// A batch's sequences as one token tree.
#[derive(Debug, Clone)]
pub(crate) struct PrefixTree {
    /// Token of each node.
    pub(crate) tokens: Vec<u32>,
    /// RoPE position of each node (its depth: the real tokens before it).
    pub(crate) positions: Vec<u32>,
    /// `[B][T]`: the node of each cell of the batch ([`NO_NODE`] at padding).
    pub(crate) node_of: Vec<Vec<u32>>,
    /// The attention calls of one layer.
    pub(crate) calls: Vec<AttentionCall>,
    /// Where each node's attention output lies in the calls' outputs, concatenated
    /// (`[rows · tq]` per call).
    pub(crate) output_row: Vec<u32>,
}

/// A chain of nodes without a branch.
struct Segment {
    /// Nodes of the ancestor segments, root first.
    ancestors: Arc<Vec<u32>>,
    nodes: Vec<u32>,
}

impl Segment {
    fn keys(&self) -> usize {
        self.ancestors.len() + self.nodes.len()
    }
}

impl PrefixTree {
    /// The tree of `batch`'s real tokens (`attention_mask` = 1), row by row.
    pub(crate) fn new(batch: &TokenBatch) -> Self {
        let mut children: HashMap<(u32, u32), u32> = HashMap::new();
        let (mut tokens, mut positions, mut parent) = (Vec::new(), Vec::new(), Vec::new());
        let mut fanout: Vec<u32> = Vec::new();
        let mut node_of = Vec::with_capacity(batch.batch_size());
        for (ids, att) in batch.input_ids.iter().zip(&batch.attention_mask) {
            let mut row = vec![NO_NODE; ids.len()];
            let (mut cur, mut depth) = (NO_NODE, 0u32);
            for (c, (&id, &a)) in ids.iter().zip(att).enumerate() {
                if a == 0 {
                    continue;
                }
                let next = *children.entry((cur, id)).or_insert_with(|| {
                    tokens.push(id);
                    positions.push(depth);
                    parent.push(cur);
                    fanout.push(0);
                    if cur != NO_NODE {
                        fanout[cur as usize] += 1;
                    }
                    (tokens.len() - 1) as u32
                });
                row[c] = next;
                cur = next;
                depth += 1;
            }
            node_of.push(row);
        }
        let segments = segments(&parent, &fanout);
        let (calls, output_row) = attention_calls(&segments, tokens.len());
        Self {
            tokens,
            positions,
            node_of,
            calls,
            output_row,
        }
    }

    /// Number of nodes (distinct prefixes).
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// (query, key) pairs the attention calls compute: each block of queries over the keys up
    /// to its last open one (`ops::computed_pairs`), padding inside that included.
    pub(crate) fn attention_pairs(&self) -> u64 {
        self.calls
            .iter()
            .map(|c| crate::ops::computed_pairs(&c.bias, c.rows, c.tq, c.tk))
            .sum()
    }
}

/// The number of distinct prefixes of `seqs` (the nodes of their token tree): the tokens a
/// shared-prefix forward over them computes.
pub fn distinct_prefix_tokens<'a>(seqs: impl IntoIterator<Item = &'a [u32]>) -> usize {
    let mut nodes: HashMap<(u32, u32), u32> = HashMap::new();
    for seq in seqs {
        let mut cur = NO_NODE;
        for &id in seq {
            let next = nodes.len() as u32;
            cur = *nodes.entry((cur, id)).or_insert(next);
        }
    }
    nodes.len()
}

/// The segments of the tree given by `parent` (nodes in insertion order, parents first) and each
/// node's number of children.
fn segments(parent: &[u32], fanout: &[u32]) -> Vec<Segment> {
    let mut segs: Vec<Segment> = Vec::new();
    let mut seg_of = vec![0usize; parent.len()];
    for (n, &p) in parent.iter().enumerate() {
        let head = p == NO_NODE || fanout[p as usize] != 1;
        if head {
            let ancestors = match p {
                NO_NODE => Arc::new(Vec::new()),
                p => {
                    // A branch ends its segment, so the parent is its segment's last node.
                    let ps = &segs[seg_of[p as usize]];
                    let mut a = Vec::with_capacity(ps.keys());
                    a.extend_from_slice(&ps.ancestors);
                    a.extend_from_slice(&ps.nodes);
                    Arc::new(a)
                }
            };
            segs.push(Segment {
                ancestors,
                nodes: Vec::new(),
            });
            seg_of[n] = segs.len() - 1;
        } else {
            seg_of[n] = seg_of[p as usize];
        }
        segs[seg_of[n]].nodes.push(n as u32);
    }
    segs
}

/// Bucket the segments into dense attention calls: longest first, a segment joins the current
/// call while the call's padded work stays within 1.5x the exact work of its segments.
fn attention_calls(segs: &[Segment], nodes: usize) -> (Vec<AttentionCall>, Vec<u32>) {
    let mut order: Vec<usize> = (0..segs.len()).collect();
    order.sort_by_key(|&s| (std::cmp::Reverse(segs[s].nodes.len()), segs[s].keys()));
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let (mut tq, mut tk, mut exact) = (0usize, 0usize, 0usize);
    for s in order {
        let (q, k) = (segs[s].nodes.len(), segs[s].keys());
        if let Some(b) = buckets.last_mut() {
            let (tq2, tk2) = (tq.max(q), tk.max(k));
            if 2 * (b.len() + 1) * tq2 * tk2 <= 3 * (exact + q * k) {
                b.push(s);
                (tq, tk, exact) = (tq2, tk2, exact + q * k);
                continue;
            }
        }
        buckets.push(vec![s]);
        (tq, tk, exact) = (q, k, q * k);
    }
    let mut output_row = vec![0u32; nodes];
    let mut offset = 0usize;
    let calls = buckets
        .iter()
        .map(|b| {
            let call = attention_call(segs, b);
            for (r, &s) in b.iter().enumerate() {
                for (i, &n) in segs[s].nodes.iter().enumerate() {
                    output_row[n as usize] = (offset + r * call.tq + i) as u32;
                }
            }
            offset += call.rows * call.tq;
            call
        })
        .collect();
    (calls, output_row)
}

/// One call over the segments `rows`: query `i` of a segment with `a` ancestor keys reads keys
/// `0..=a + i`.
fn attention_call(segs: &[Segment], rows: &[usize]) -> AttentionCall {
    let tq = rows.iter().map(|&s| segs[s].nodes.len()).max().unwrap_or(0);
    let tk = rows.iter().map(|&s| segs[s].keys()).max().unwrap_or(0);
    let mut queries = Vec::with_capacity(rows.len() * tq);
    let mut keys = Vec::with_capacity(rows.len() * tk);
    let mut bias = Vec::with_capacity(rows.len() * tq * tk);
    for &s in rows {
        let seg = &segs[s];
        let (a, own) = (seg.ancestors.len(), seg.nodes.len());
        queries.extend_from_slice(&seg.nodes);
        queries.extend(std::iter::repeat_n(0, tq - own));
        keys.extend_from_slice(&seg.ancestors);
        keys.extend_from_slice(&seg.nodes);
        keys.extend(std::iter::repeat_n(0, tk - a - own));
        for i in 0..tq {
            bias.extend((0..tk).map(|j| {
                if i < own && j <= a + i {
                    0.0
                } else {
                    MASK_VALUE
                }
            }));
        }
    }
    AttentionCall {
        rows: rows.len(),
        tq,
        tk,
        queries,
        keys,
        bias: Arc::new(bias),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(rows: &[&[u32]]) -> TokenBatch {
        let seqs: Vec<(Vec<u32>, Vec<u8>)> = rows
            .iter()
            .map(|r| (r.to_vec(), vec![0; r.len()]))
            .collect();
        TokenBatch::right_padded(&seqs, 0).unwrap()
    }

    #[test]
    fn a_group_shares_its_prompt_and_each_member_reads_it() {
        // Prompt [5 6 7], members [8 9], [8 4], [3]: nodes 5 6 7 | 8 | 9 | 4 | 3.
        let t = PrefixTree::new(&batch(&[&[5, 6, 7, 8, 9], &[5, 6, 7, 8, 4], &[5, 6, 7, 3]]));
        assert_eq!(t.tokens, vec![5, 6, 7, 8, 9, 4, 3]);
        assert_eq!(t.positions, vec![0, 1, 2, 3, 4, 4, 3]);
        assert_eq!(t.node_of[0], vec![0, 1, 2, 3, 4]);
        assert_eq!(t.node_of[1], vec![0, 1, 2, 3, 5]);
        assert_eq!(t.node_of[2], vec![0, 1, 2, 6, NO_NODE]);
        // Segments: [5 6 7] (3 queries, 3 keys), [8] (1, 4), [9] (1, 5), [4] (1, 5), [3] (1, 4).
        // The prompt gets a call of its own; the four one-token segments share one (keys padded
        // to 5: 4 x 1 x 5 = 20 pairs for 18 exact).
        assert_eq!(t.calls.len(), 2);
        let (p, m) = (&t.calls[0], &t.calls[1]);
        assert_eq!((p.rows, p.tq, p.tk), (1, 3, 3));
        assert_eq!(p.queries, vec![0, 1, 2]);
        assert_eq!(
            *p.bias,
            [0.0, -1e9, -1e9, 0.0, 0.0, -1e9, 0.0, 0.0, 0.0].to_vec()
        );
        assert_eq!((m.rows, m.tq, m.tk), (4, 1, 5));
        // Each member segment reads the prompt and its own ancestors, in tree order.
        let rows: Vec<(u32, Vec<u32>)> = (0..4)
            .map(|r| {
                let keys = (0..5)
                    .filter(|&j| m.bias[r * 5 + j] == 0.0)
                    .map(|j| m.keys[r * 5 + j])
                    .collect();
                (m.queries[r], keys)
            })
            .collect();
        let mut rows = rows;
        rows.sort();
        assert_eq!(
            rows,
            vec![
                (3, vec![0, 1, 2, 3]),
                (4, vec![0, 1, 2, 3, 4]),
                (5, vec![0, 1, 2, 3, 5]),
                (6, vec![0, 1, 2, 6]),
            ]
        );
        // Every node's output row points at its own query slot.
        let slots: Vec<u32> = p.queries.iter().chain(&m.queries).copied().collect();
        for (n, &r) in t.output_row.iter().enumerate() {
            assert_eq!(slots[r as usize], n as u32);
        }
        // The kernel computes each query block up to its last open key: the prompt's 3 x 3
        // square in one block, and the short member row's padded fifth key not at all.
        assert_eq!(t.attention_pairs(), 9 + 18);
        let seqs: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[5, 6, 7, 8, 4], &[5, 6, 7, 3]];
        assert_eq!(distinct_prefix_tokens(seqs), 7);
    }

    #[test]
    fn identical_sequences_share_every_node_and_padding_has_none() {
        let t = PrefixTree::new(&batch(&[&[1, 2, 3], &[1, 2, 3], &[1, 2]]));
        assert_eq!(t.len(), 3);
        assert_eq!(t.node_of[2], vec![0, 1, NO_NODE]);
        assert_eq!(t.calls.len(), 1);
    }
}
