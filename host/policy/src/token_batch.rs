//! A padded batch of token sequences for training: ids, attention and loss masks, and the token
//! kinds of constrained decoding; what [`crate::scoring`] and [`crate::shared_prefix`] score.

use candle_core::{Device, Tensor};

use crate::constrain::TokenKind;
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

    /// How token `t` of row `row` was generated ([`TokenKind::Free`] without constraints).
    pub(crate) fn kind(&self, row: usize, t: usize) -> &TokenKind {
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
