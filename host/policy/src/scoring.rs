//! Per-token log-probs and entropy of given token sequences, as tensors that backpropagate.

use candle_core::{D, DType, Device, Tensor};

use crate::constrain::TokenKind;
use crate::model::{AttentionMask, LlamaModel};
use crate::shared_prefix::{NO_NODE, PrefixTree};
use crate::{PolicyError, Result};

/// A padded batch of token sequences for training.
///
/// All rows have the same length T. Padding may be on either side (`attention_mask` = 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBatch {
    /// [B, T] token ids (any id at padding positions).
    pub input_ids: Vec<Vec<u32>>,
    /// [B, T] 1 for real tokens, 0 for padding.
    pub attention_mask: Vec<Vec<u8>>,
    /// [B, T] 1 where token t is scored (a policy-generated response token), else 0. Column 0
    /// can never be scored (nothing predicts it); a scored token must be a real token.
    pub loss_mask: Vec<Vec<u8>>,
    /// [B, T] how each token was generated under constrained decoding ([`crate::constrain`]), or
    /// empty when every token is free: a forced token scores log-prob 0 and entropy 0 with no
    /// gradient, a choice token is normalised over its allowed set. See
    /// [`TokenBatch::with_constraints`].
    pub kinds: Vec<Vec<TokenKind>>,
}

impl TokenBatch {
    /// Check shapes and masks.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] naming the field.
    pub fn new(
        input_ids: Vec<Vec<u32>>,
        attention_mask: Vec<Vec<u8>>,
        loss_mask: Vec<Vec<u8>>,
    ) -> Result<Self> {
        let b = Self {
            input_ids,
            attention_mask,
            loss_mask,
            kinds: Vec::new(),
        };
        b.validate()?;
        Ok(b)
    }

    /// Attach the token kinds of constrained decoding (`docs/ragen-semantics.md` §5,
    /// "Constrained action decoding"), one per token; rows shorter than T (unpadded) are padded
    /// with [`TokenKind::Free`].
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when there is not one row per sequence, or a row is
    /// longer than T.
    pub fn with_constraints(mut self, mut kinds: Vec<Vec<TokenKind>>) -> Result<Self> {
        let t = self.seq_len();
        if kinds.len() != self.batch_size() || kinds.iter().any(|k| k.len() > t) {
            return Err(PolicyError::arg(
                "kinds",
                "need one row per sequence, each at most as long as the batch",
            ));
        }
        for k in &mut kinds {
            k.resize(t, TokenKind::Free);
        }
        self.kinds = kinds;
        Ok(self)
    }

    fn kind(&self, row: usize, t: usize) -> &TokenKind {
        self.kinds.get(row).map_or(&TokenKind::Free, |k| &k[t])
    }

    /// Right-pad `(tokens, loss_mask)` sequences to the longest one with `pad_id`.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when a mask length differs from its sequence.
    pub fn right_padded(seqs: &[(Vec<u32>, Vec<u8>)], pad_id: u32) -> Result<Self> {
        let t = seqs.iter().map(|s| s.0.len()).max().unwrap_or(0);
        let mut ids = Vec::new();
        let mut att = Vec::new();
        let mut lm = Vec::new();
        for (tok, mask) in seqs {
            if tok.len() != mask.len() {
                return Err(PolicyError::arg(
                    "loss_mask",
                    "length differs from its token sequence",
                ));
            }
            let pad = t - tok.len();
            ids.push(
                tok.iter()
                    .copied()
                    .chain(std::iter::repeat_n(pad_id, pad))
                    .collect(),
            );
            att.push(
                std::iter::repeat_n(1, tok.len())
                    .chain(std::iter::repeat_n(0, pad))
                    .collect(),
            );
            lm.push(
                mask.iter()
                    .copied()
                    .chain(std::iter::repeat_n(0, pad))
                    .collect(),
            );
        }
        Self::new(ids, att, lm)
    }

    /// Rows `prompt ++ response`, right-padded with `pad_id`, scoring the response tokens (how a
    /// sample is scored for training or checked against its sampling log-probs).
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when the counts differ or a prompt is empty.
    pub fn prompts_and_responses(
        prompts: &[Vec<u32>],
        responses: &[Vec<u32>],
        pad_id: u32,
    ) -> Result<Self> {
        if prompts.len() != responses.len() || prompts.iter().any(Vec::is_empty) {
            return Err(PolicyError::arg(
                "prompts",
                "need one non-empty prompt per response",
            ));
        }
        let seqs: Vec<(Vec<u32>, Vec<u8>)> = prompts
            .iter()
            .zip(responses)
            .map(|(p, r)| {
                let ids: Vec<u32> = p.iter().chain(r).copied().collect();
                let mask = (0..ids.len()).map(|i| u8::from(i >= p.len())).collect();
                (ids, mask)
            })
            .collect();
        Self::right_padded(&seqs, pad_id)
    }

    /// B.
    pub fn batch_size(&self) -> usize {
        self.input_ids.len()
    }

    /// T.
    pub fn seq_len(&self) -> usize {
        self.input_ids.first().map_or(0, Vec::len)
    }

    /// Number of scored tokens.
    pub fn num_scored(&self) -> usize {
        self.loss_mask.iter().flatten().filter(|&&m| m != 0).count()
    }

    /// Number of real (non-padding) tokens.
    pub fn num_tokens(&self) -> usize {
        self.attention_mask
            .iter()
            .flatten()
            .filter(|&&m| m != 0)
            .count()
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let b = self.input_ids.len();
        let t = self.seq_len();
        if b == 0 || t < 2 {
            return Err(PolicyError::arg(
                "input_ids",
                "need at least one row of at least 2 tokens",
            ));
        }
        let rect = |rows: usize, lens: &mut dyn Iterator<Item = usize>| {
            rows == b && {
                let mut ok = true;
                for l in lens {
                    ok &= l == t;
                }
                ok
            }
        };
        if !rect(
            self.input_ids.len(),
            &mut self.input_ids.iter().map(Vec::len),
        ) {
            return Err(PolicyError::arg("input_ids", "rows differ in length"));
        }
        if !rect(
            self.attention_mask.len(),
            &mut self.attention_mask.iter().map(Vec::len),
        ) {
            return Err(PolicyError::arg(
                "attention_mask",
                "shape differs from input_ids",
            ));
        }
        if !rect(
            self.loss_mask.len(),
            &mut self.loss_mask.iter().map(Vec::len),
        ) {
            return Err(PolicyError::arg(
                "loss_mask",
                "shape differs from input_ids",
            ));
        }
        for (lm, am) in self.loss_mask.iter().zip(&self.attention_mask) {
            if lm[0] != 0 {
                return Err(PolicyError::arg("loss_mask", "column 0 cannot be scored"));
            }
            if lm.iter().zip(am).any(|(&l, &a)| l != 0 && a == 0) {
                return Err(PolicyError::arg("loss_mask", "a scored token is padding"));
            }
        }
        Ok(())
    }

    /// The shifted loss mask as f32 [B, T-1]: column t is 1 when token t+1 is scored.
    ///
    /// # Errors
    /// Tensor allocation.
    pub fn shifted_loss_mask(&self, device: &Device) -> Result<Tensor> {
        let (b, t) = (self.batch_size(), self.seq_len());
        let v: Vec<f32> = self
            .loss_mask
            .iter()
            .flat_map(|r| r[1..].iter().map(|&m| f32::from(m != 0)))
            .collect();
        Ok(Tensor::from_vec(v, (b, t - 1), device)?)
    }

    pub(crate) fn key_valid(&self) -> Vec<Vec<bool>> {
        self.attention_mask
            .iter()
            .map(|r| r.iter().map(|&m| m != 0).collect())
            .collect()
    }

    pub(crate) fn ids_tensor(&self, device: &Device) -> Result<Tensor> {
        let flat: Vec<u32> = self.input_ids.iter().flatten().copied().collect();
        Ok(Tensor::from_vec(
            flat,
            (self.batch_size(), self.seq_len()),
            device,
        )?)
    }
}

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
