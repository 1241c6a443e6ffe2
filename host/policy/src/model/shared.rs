//! The training forward over a [`PrefixTree`] (shared-prefix training, `shared_prefix.rs`): every
//! node once, as one `[N, D]` matrix, so the projections and the MLP run on each distinct prefix
//! once; each layer's attention gathers the queries and keys of the tree's segments into a few
//! dense calls of the fused kernel ([`ops::attention`]) and scatters the outputs back. Gathers are
//! `index_select`s, so the backward sums the key and value gradients of a shared node over every
//! segment that read it. Fused CPU kernels in f32 ([`LlamaModel::shares_training_prefixes`]).

use std::sync::Arc;

use candle_core::{Device, Tensor};

use super::{DecoderLayer, LlamaModel, rope_cos_sin};
use crate::Result;
use crate::ops::{self, RopeTables};
use crate::shared_prefix::PrefixTree;

/// One attention call's gathers as tensors.
struct CallIndex {
    rows: usize,
    tq: usize,
    tk: usize,
    queries: Tensor,
    keys: Tensor,
    mask: ops::HostMask,
}

/// What every layer of one shared forward reads.
struct TreeIndex {
    rope: RopeTables,
    calls: Vec<CallIndex>,
    output_row: Tensor,
}

impl TreeIndex {
    fn new(model: &LlamaModel, tree: &PrefixTree, device: &Device) -> Result<Self> {
        let (cos, sin) = rope_cos_sin(model.config(), &tree.positions);
        let u32s = |v: &[u32]| Tensor::from_slice(v, v.len(), device);
        let calls = tree
            .calls
            .iter()
            .map(|c| {
                Ok(CallIndex {
                    rows: c.rows,
                    tq: c.tq,
                    tk: c.tk,
                    queries: u32s(&c.queries)?,
                    keys: u32s(&c.keys)?,
                    mask: ops::HostMask::new(c.bias.clone(), c.tk),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            rope: RopeTables {
                cos: Arc::new(cos),
                sin: Arc::new(sin),
            },
            calls,
            output_row: u32s(&tree.output_row)?,
        })
    }
}

impl LlamaModel {
    /// Final hidden states (after the last RMSNorm) of every node of `tree`: `[N, D]` f32.
    ///
    /// # Errors
    /// An empty tree; tensor errors.
    pub(crate) fn forward_shared(&self, tree: &PrefixTree) -> Result<Tensor> {
        let n = tree.len();
        if n == 0 {
            return Err(crate::PolicyError::arg("batch", "no real token to score"));
        }
        let device = self.device().clone();
        let index = TreeIndex::new(self, tree, &device)?;
        let ids = Tensor::from_slice(&tree.tokens, n, &device)?;
        let mut x = self.embed_tokens.index_select(&ids, 0)?;
        for layer in &self.layers {
            x = self.layer_shared(layer, &x, &index)?;
        }
        let pairs = tree.attention_pairs();
        crate::flops::add_layers(self.config(), n as u64, pairs, self.training());
        self.rms_norm(&x, &self.norm)
    }

    /// One decoder block on the nodes x `[N, D]`.
    fn layer_shared(&self, l: &DecoderLayer, x: &Tensor, index: &TreeIndex) -> Result<Tensor> {
        let n = x.dim(0)?;
        let (h, kv, hd) = self.heads();
        let xn = self.rms_norm(x, &l.input_layernorm)?;
        let q = ops::rope(&l.q_proj.forward(&xn)?.reshape((1, n, h, hd))?, &index.rope)?
            .reshape((n, h * hd))?;
        let k = ops::rope(
            &l.k_proj.forward(&xn)?.reshape((1, n, kv, hd))?,
            &index.rope,
        )?
        .reshape((n, kv * hd))?;
        let v = l.v_proj.forward(&xn)?;
        let scale = 1.0 / (hd as f64).sqrt();
        let outs = index
            .calls
            .iter()
            .map(|c| {
                let qc = q
                    .index_select(&c.queries, 0)?
                    .reshape((c.rows, c.tq, h, hd))?;
                let kc = k
                    .index_select(&c.keys, 0)?
                    .reshape((c.rows, c.tk, kv, hd))?;
                let vc = v
                    .index_select(&c.keys, 0)?
                    .reshape((c.rows, c.tk, kv, hd))?;
                ops::attention(&qc, &kc, &vc, &c.mask, scale)?.reshape((c.rows * c.tq, h * hd))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let outs = if outs.len() == 1 {
            outs.into_iter().next().expect("one call")
        } else {
            Tensor::cat(&outs, 0)?
        };
        let attn = outs.index_select(&index.output_row, 0)?;
        let x = (x + l.o_proj.forward(&attn)?)?;
        self.mlp_block(l, &x)
    }
}
