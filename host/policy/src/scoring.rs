//! Per-token log-probs and entropy of given token sequences, as tensors that backpropagate.

use candle_core::{D, DType, Tensor};

use crate::Result;
use crate::constrain::TokenKind;
use crate::model::{AttentionMask, LlamaModel};
use crate::shared_prefix::{NO_NODE, PrefixTree};
use crate::token_batch::TokenBatch;

/// Per-token scores of a [`TokenBatch`]; column t refers to token t+1 (predicted at position t).
#[derive(Debug, Clone)]
pub struct Scores {
    /// [B, T-1] f32: `log π(x_{t+1} | x_{≤t})` at scored positions, 0 elsewhere. Backpropagates.
    pub logprobs: Tensor,
    /// [B, T-1] f32: entropy of π(· | x_{≤t}) in nats at scored positions, 0 elsewhere. Backpropagates.
    pub entropy: Tensor,
    /// [B, T-1] f32: 1 at scored positions (the shifted loss mask).
    pub mask: Tensor,
}

/// Final hidden states of a batch: [B, T, D] (f32), full causal attention with padding masked.
///
/// # Errors
/// Invalid batch; tensor errors.
pub fn hidden_states(model: &LlamaModel, batch: &TokenBatch) -> Result<Tensor> {
    batch.validate()?;
    let device = model.device();
    let mask = AttentionMask::new(&batch.key_valid(), batch.seq_len(), model.config(), device)?;
    model.forward_hidden(&batch.ids_tensor(device)?, &mask, None)
}

/// The final hidden states of a batch as rows of one `[M, D]` matrix: the padded `[B·T, D]`, or
/// one row per node of the batch's prefix tree ([`LlamaModel::shares_training_prefixes`]).
pub(crate) struct HiddenRows {
    /// `[M, D]` f32.
    pub(crate) rows: Tensor,
    /// The tree's node of each cell, when shared.
    nodes: Option<Vec<Vec<u32>>>,
    t: usize,
}

impl HiddenRows {
    /// The hidden states of `batch` under `model`, shared where the model shares prefixes.
    pub(crate) fn of(model: &LlamaModel, batch: &TokenBatch) -> Result<Self> {
        let t = batch.seq_len();
        if model.shares_training_prefixes() {
            batch.validate()?;
            let tree = PrefixTree::new(batch);
            let rows = model.forward_shared(&tree)?;
            return Ok(Self {
                rows,
                nodes: Some(tree.node_of),
                t,
            });
        }
        let h = hidden_states(model, batch)?;
        let d = h.dim(2)?;
        Ok(Self {
            rows: h.reshape((batch.batch_size() * t, d))?,
            nodes: None,
            t,
        })
    }

    /// The row of cell (`r`, `c`) of the batch (any row at padding: never read for a loss).
    pub(crate) fn row(&self, r: usize, c: usize) -> u32 {
        match &self.nodes {
            None => (r * self.t + c) as u32,
            Some(n) => match n[r][c] {
                NO_NODE => 0,
                node => node,
            },
        }
    }

    /// `f` of every row `[M, ...]` laid out as the batch's `[B, T, ...]` cells.
    pub(crate) fn cells(&self, f: &Tensor, b: usize) -> Result<Tensor> {
        if self.nodes.is_none() {
            return Ok(f.clone());
        }
        let idx: Vec<u32> = (0..b)
            .flat_map(|r| (0..self.t).map(move |c| (r, c)))
            .map(|(r, c)| self.row(r, c))
            .collect();
        let idx = Tensor::from_vec(idx, b * self.t, f.device())?;
        Ok(f.index_select(&idx, 0)?)
    }
}

/// Log-probs and entropy of the scored tokens of `batch`.
///
/// The lm_head is applied only at the N positions whose next token is scored ([N, D] -> [N, V]),
/// and results are scattered back to [B, T-1] with a differentiable `index_add`.
/// Log-softmax and entropy subtract a detached max (as torch's `log_softmax` does; verl `torch_functional.py::entropy_from_logits`).
/// Where the model shares prefixes ([`LlamaModel::shares_training_prefixes`]), each distinct prefix of the
/// batch is computed once ([`crate::shared_prefix`]); the scores are the same.
///
/// # Errors
/// Invalid batch; tensor errors.
pub fn score(model: &LlamaModel, batch: &TokenBatch) -> Result<Scores> {
    let hidden = HiddenRows::of(model, batch)?;
    let device = model.device().clone();
    let (b, t) = (batch.batch_size(), batch.seq_len());
    // Constrained decoding hook ([`crate::constrain`]): free tokens use the full softmax, choice
    // tokens the softmax over their allowed set; forced tokens are left at 0 (no gradient).
    let mut free = Positions::default();
    let mut choice = Positions::default();
    let mut allowed: Vec<&[u32]> = Vec::new();
    for (r, (ids, lm)) in batch.input_ids.iter().zip(&batch.loss_mask).enumerate() {
        for p in 0..t - 1 {
            if lm[p + 1] == 0 {
                continue;
            }
            let at = (hidden.row(r, p), (r * (t - 1) + p) as u32, ids[p + 1]);
            match batch.kind(r, p + 1) {
                TokenKind::Free => free.push(at),
                TokenKind::Forced => {}
                TokenKind::Choice(set) => {
                    choice.push(at);
                    allowed.push(set);
                }
            }
        }
    }
    let mask = batch.shifted_loss_mask(&device)?;
    let zeros = Tensor::zeros(b * (t - 1), DType::F32, &device)?;
    if free.src.is_empty() && choice.src.is_empty() {
        // Nothing (or only forced tokens) scored: zero tensors still connected to the graph
        // through `hidden`.
        let z = (hidden.rows.sum_all()? * 0.0)?.broadcast_add(&zeros.reshape((b, t - 1))?)?;
        return Ok(Scores {
            logprobs: z.clone(),
            entropy: z,
            mask,
        });
    }
    let (mut logprobs, mut entropy) = (zeros.clone(), zeros);
    let h = &hidden.rows;
    for (pos, sets) in [(free, None), (choice, Some(&allowed))] {
        if pos.src.is_empty() {
            continue;
        }
        let n = pos.src.len();
        let src = Tensor::from_vec(pos.src, n, &device)?;
        let dst = Tensor::from_vec(pos.dst, n, &device)?;
        let hs = h.index_select(&src, 0)?; // [N, D]
        let (lp, ent) = match sets {
            // lm_head, log-softmax and entropy in row chunks: no [N, V] logits tensor.
            None if model.fuse_logprobs(&hs) => {
                crate::flops::add_head(model.config(), n as u64, model.training());
                let out = crate::ops::token_logprobs(&hs, model.lm_head_weight(), pos.targets)?;
                (
                    out.narrow(1, 0, 1)?.squeeze(1)?.contiguous()?,
                    out.narrow(1, 1, 1)?.squeeze(1)?.contiguous()?,
                )
            }
            None => {
                let tgt = Tensor::from_vec(pos.targets, (n, 1), &device)?;
                logprobs_and_entropy(&model.lm_logits(&hs)?, &tgt)?
            }
            Some(sets) => {
                let tgt = Tensor::from_vec(pos.targets, (n, 1), &device)?;
                allowed_logprobs_and_entropy(&model.lm_logits(&hs)?, &tgt, sets)?
            }
        };
        logprobs = logprobs.index_add(&dst, &lp, 0)?;
        entropy = entropy.index_add(&dst, &ent, 0)?;
    }
    let logprobs = logprobs.reshape((b, t - 1))?;
    let entropy = entropy.reshape((b, t - 1))?;
    Ok(Scores {
        logprobs,
        entropy,
        mask,
    })
}

/// Scored positions of one kind: flat hidden row, flat output column, target token.
#[derive(Default)]
struct Positions {
    src: Vec<u32>,
    dst: Vec<u32>,
    targets: Vec<u32>,
}

impl Positions {
    fn push(&mut self, (src, dst, target): (u32, u32, u32)) {
        self.src.push(src);
        self.dst.push(dst);
        self.targets.push(target);
    }
}

/// logits [N, V], targets [N, 1] u32 -> (log-prob of target [N], entropy [N]).
pub(crate) fn logprobs_and_entropy(logits: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor)> {
    let m = logits.max_keepdim(D::Minus1)?.detach();
    let z = logits.broadcast_sub(&m)?; // [N, V]
    let lse = z.exp()?.sum_keepdim(D::Minus1)?.log()?; // [N, 1]
    let lp = (z.gather(targets, 1)? - &lse)?.squeeze(1)?;
    let p = z.broadcast_sub(&lse)?.exp()?;
    let ent = (lse.squeeze(1)? - (p * &z)?.sum(D::Minus1)?)?;
    Ok((lp, ent))
}

/// Log-prob of `targets` and entropy, both over the allowed sets only: logits [N, V], one
/// allowed set per row. Disallowed entries get -1e30 (not -inf, so `p * z` stays 0, not NaN).
pub(crate) fn allowed_logprobs_and_entropy(
    logits: &Tensor,
    targets: &Tensor,
    allowed: &[&[u32]],
) -> Result<(Tensor, Tensor)> {
    let (n, v) = logits.dims2()?;
    let mut bias = vec![-1e30f32; n * v];
    for (r, set) in allowed.iter().enumerate() {
        for &t in *set {
            bias[r * v + t as usize] = 0.0;
        }
    }
    let bias = Tensor::from_vec(bias, (n, v), logits.device())?.to_dtype(DType::F32)?;
    let masked = logits.to_dtype(DType::F32)?.broadcast_add(&bias)?;
    logprobs_and_entropy(&masked, targets)
}
