//! The packed forward for sampling with cached segments ([`crate::prefix_cache`]; prefix sharing
//! in `docs/ragen-semantics.md`, "Prefix sharing in rollouts"): the new tokens of every sequence in
//! one `[N, D]` matrix (no padding: a prompt continuation of 200 tokens and a decode step of 1 ride
//! together), each token at its own absolute position, each sequence reading its chain of cached
//! segments in place ([`crate::ops::chain_attention`]). The new keys and values are appended to
//! each sequence's own segment, whose room was reserved up front, so decoding never copies the
//! cache. Fused CPU kernels in f32 only ([`LlamaModel::shares_prefixes`]); no autograd.

use std::sync::Arc;

use candle_core::Tensor;

use crate::Result;
use crate::model::{DecoderLayer, LlamaModel, rope_cos_sin};
use crate::ops::{self, ChainQuery, Heads, KvBlock, RopeTables};
use crate::prefix_cache::{SegId, SegStore};

/// One sequence of a packed call: its own segment and where its new tokens sit.
struct Span {
    leaf: SegId,
    t0: usize,
    n: usize,
    /// The segments it reads, root first, with the positions read of each.
    chain: Vec<(SegId, usize)>,
}

impl LlamaModel {
    /// Feed `seqs` (own segment, new tokens) through the model, appending their keys and values
    /// to the segments, and return the final hidden states `[want.len(), D]` of the last new
    /// token of the sequences `want` (indices into `seqs`). Every sequence has at least one new
    /// token; no segment appears twice.
    ///
    /// # Errors
    /// Tensor errors.
    pub(crate) fn forward_packed(
        &self,
        store: &mut SegStore,
        seqs: &[(SegId, &[u32])],
        want: &[usize],
    ) -> Result<Tensor> {
        let cfg = self.config();
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(seqs.len());
        for &(leaf, toks) in seqs {
            let seg = store.get_mut(leaf);
            let p0 = seg.end() as u32;
            positions.extend(p0..p0 + toks.len() as u32);
            seg.tokens.extend_from_slice(toks);
            spans.push(Span {
                leaf,
                t0: ids.len(),
                n: toks.len(),
                chain: Vec::new(),
            });
            ids.extend_from_slice(toks);
        }
        for s in &mut spans {
            s.chain = store.chain(s.leaf);
        }
        let (cos, sin) = rope_cos_sin(cfg, &positions);
        let rope = RopeTables {
            cos: Arc::new(cos),
            sin: Arc::new(sin),
        };
        let n = ids.len();
        let device = self.device().clone();
        let mut x = self
            .embed_tokens
            .index_select(&Tensor::from_vec(ids, n, &device)?, 0)?;
        for (li, layer) in self.layers.iter().enumerate() {
            x = self.layer_packed(layer, li, &x, &rope, store, &spans)?;
        }
        // A token at position p attends to p + 1 keys (its chain and itself).
        let pairs: u64 = positions.iter().map(|&p| u64::from(p) + 1).sum();
        crate::flops::add_layers(cfg, n as u64, pairs, self.training());
        let last: Vec<u32> = want
            .iter()
            .map(|&s| (spans[s].t0 + spans[s].n - 1) as u32)
            .collect();
        let k = last.len();
        let x = x.index_select(&Tensor::from_vec(last, k, &device)?, 0)?;
        Ok(ops::rms_norm(&x, &self.norm, cfg.rms_norm_eps)?)
    }

    fn layer_packed(
        &self,
        l: &DecoderLayer,
        li: usize,
        x: &Tensor,
        rope: &RopeTables,
        store: &mut SegStore,
        spans: &[Span],
    ) -> Result<Tensor> {
        let cfg = self.config();
        let n = x.dim(0)?;
        let hs = Heads {
            h: cfg.num_attention_heads,
            kv: cfg.num_kv_heads(),
            hd: cfg.head_dim(),
        };
        let kvd = hs.kv * hs.hd;
        let eps = cfg.rms_norm_eps;
        let h = ops::rms_norm(x, &l.input_layernorm, eps)?;
        let q = ops::rope(&l.q_proj.forward(&h)?.reshape((1, n, hs.h, hs.hd))?, rope)?;
        let k = ops::rope(&l.k_proj.forward(&h)?.reshape((1, n, hs.kv, hs.hd))?, rope)?;
        let v = l.v_proj.forward(&h)?;
        ops::with_slice(&k, "packed-forward", |k| {
            ops::with_slice(&v, "packed-forward", |v| {
                for s in spans {
                    let seg = store.get_mut(s.leaf);
                    seg.k[li].extend_from_slice(&k[s.t0 * kvd..(s.t0 + s.n) * kvd]);
                    seg.v[li].extend_from_slice(&v[s.t0 * kvd..(s.t0 + s.n) * kvd]);
                }
            })
        })??;
        let store = &*store;
        let queries: Vec<ChainQuery<'_>> = spans
            .iter()
            .map(|s| ChainQuery {
                t0: s.t0,
                n: s.n,
                blocks: s
                    .chain
                    .iter()
                    .map(|&(seg, used)| {
                        let seg = store.get(seg);
                        KvBlock {
                            k: &seg.k[li][..used * kvd],
                            v: &seg.v[li][..used * kvd],
                            len: used,
                        }
                    })
                    .collect(),
            })
            .collect();
        // As the padded path computes it (`model/layer.rs`, `attention_fused`).
        let scale = (1.0 / (hs.hd as f64).sqrt()) as f32;
        let attn = ops::with_slice(&q, "packed-forward", |q| {
            ops::chain_attention(q, &queries, hs, scale)
        })?;
        let attn = Tensor::from_vec(attn, (n, hs.h * hs.hd), x.device())?;
        let x = (x + l.o_proj.forward(&attn)?)?;
        let h = ops::rms_norm(&x, &l.post_attention_layernorm, eps)?;
        let act = ops::swiglu(&l.gate_proj.forward(&h)?, &l.up_proj.forward(&h)?)?;
        Ok((x + l.down_proj.forward(&act)?)?)
    }
}
