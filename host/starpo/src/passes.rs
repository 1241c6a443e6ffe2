//! The forward/backward passes of an update and of the scoring before it. verl's
//! `micro_batch_size` sets the loss weighting (each micro-batch's token-mean divided by the
//! number of micro-batches, [`crate::update::accumulate`]); here it no longer sets what one
//! forward holds: consecutive micro-batches are packed into one pass while the pass's distinct
//! tokens (its prefix tree's nodes, [`ragen_gym_policy::shared_prefix`]) stay within
//! `actor.max_tokens_per_pass`. A pass computes each prefix its sequences share once, and each of
//! its micro-batches keeps its own loss and weight, so the gradients are those of one pass per
//! micro-batch.

use crate::batch::TrainSample;
use crate::batch::tensors::{pad_rows, token_batch};
use crate::config::ActorConfig;
use ragen_gym_policy::{self as pol, Tensor};

/// One pass: consecutive micro-batches (indices into the samples).
pub type Pass<'a> = Vec<&'a [usize]>;

/// The passes over `indices`, in micro-batches of `micro`: consecutive micro-batches share a
/// pass while its distinct tokens stay within `budget` (a pass holds at least one micro-batch;
/// `budget` 0: one micro-batch per pass).
pub fn plan<'a>(
    samples: &[TrainSample],
    indices: &'a [usize],
    micro: usize,
    budget: usize,
) -> Vec<Pass<'a>> {
    let tokens = |pass: &Pass<'_>| {
        ragen_gym_policy::distinct_prefix_tokens(
            pass.iter()
                .flat_map(|mc| mc.iter())
                .map(|&i| samples[i].input_ids.as_slice()),
        )
    };
    let mut passes: Vec<Pass<'a>> = Vec::new();
    for mc in indices.chunks(micro.max(1)) {
        if let Some(last) = passes.last_mut().filter(|_| budget > 0) {
            last.push(mc);
            if tokens(last) <= budget {
                continue;
            }
            last.pop();
        }
        passes.push(vec![mc]);
    }
    passes
}

/// The passes of one optimiser step over the mini-batch `mb` under the actor's
/// `micro_batch_size` and `max_tokens_per_pass`, and the step's number of micro-batches (each
/// micro-batch's loss is divided by it: verl's weighting, [`crate::update::accumulate`]). The RL
/// update's actor and critic steps and SFT's steps all take their passes here.
pub fn step_passes<'m>(
    actor: &ActorConfig,
    samples: &[TrainSample],
    mb: &'m [usize],
) -> (Vec<Pass<'m>>, usize) {
    let micro = actor.micro_batch_size.max(1);
    (
        plan(samples, mb, micro, actor.max_tokens_per_pass),
        mb.len().div_ceil(micro),
    )
}

/// The sample indices of a pass, in order.
pub fn indices(pass: &Pass<'_>) -> Vec<usize> {
    pass.concat()
}

/// A pass as model input ([`crate::passes`]): its samples' padded tokens, and each of its
/// micro-batches' rows of a `[B, width]` tensor of the pass.
pub(crate) struct PassBatch<'a> {
    pub(crate) batch: pol::TokenBatch,
    indices: Vec<usize>,
    device: &'a pol::Device,
}

impl<'a> PassBatch<'a> {
    pub(crate) fn new(
        samples: &[TrainSample],
        pass: &Pass<'_>,
        pad_id: u32,
        device: &'a pol::Device,
    ) -> pol::Result<Self> {
        let indices = indices(pass);
        let refs: Vec<&TrainSample> = indices.iter().map(|&i| &samples[i]).collect();
        Ok(Self {
            batch: token_batch(&refs, pad_id)?,
            indices,
            device,
        })
    }

    /// Scored positions per row.
    pub(crate) fn width(&self) -> usize {
        self.batch.seq_len() - 1
    }

    /// The rows of micro-batch `mc` in a `[B, ...]` tensor of the pass.
    pub(crate) fn pick(&self, t: &Tensor, mc: &[usize]) -> pol::Result<Tensor> {
        if mc.len() == self.indices.len() {
            return Ok(t.clone());
        }
        let local: Vec<u32> = mc
            .iter()
            .map(|i| {
                self.indices
                    .iter()
                    .position(|j| j == i)
                    .expect("in the pass") as u32
            })
            .collect();
        let n = local.len();
        let local = Tensor::from_vec(local, n, self.device)?;
        Ok(t.contiguous()?.index_select(&local, 0)?)
    }

    /// `rows[i]` of micro-batch `mc`'s samples as a `[b, width]` tensor.
    pub(crate) fn rows(&self, rows: &[Vec<f32>], mc: &[usize]) -> pol::Result<Tensor> {
        let picked: Vec<&[f32]> = mc.iter().map(|&i| rows[i].as_slice()).collect();
        pad_rows(&picked, self.width(), self.device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ids: &[u32]) -> TrainSample {
        TrainSample {
            input_ids: ids.to_vec(),
            loss_mask: vec![1.0; ids.len() - 1],
            token_rewards: vec![0.0; ids.len() - 1],
            choices: Vec::new(),
            rollout_logp: Vec::new(),
            group: 0,
            index: 0,
            turns: Vec::new(),
        }
    }

    #[test]
    fn micro_batches_share_a_pass_while_their_distinct_tokens_fit() {
        // A group of 3 on prompt [1 2 3 4] (4 + 2 tokens each: 4, 6, 8 distinct), then another
        // prompt (+6).
        let s: Vec<TrainSample> = [
            &[1, 2, 3, 4, 5, 6][..],
            &[1, 2, 3, 4, 7, 8],
            &[1, 2, 3, 4, 9, 9],
            &[5, 5, 5, 5, 5, 5],
        ]
        .iter()
        .map(|ids| sample(ids))
        .collect();
        let idx: Vec<usize> = (0..4).collect();
        let shape = |p: &[Pass<'_>]| -> Vec<Vec<usize>> { p.iter().map(indices).collect() };
        assert_eq!(shape(&plan(&s, &idx, 1, 10)), vec![vec![0, 1, 2], vec![3]]);
        assert_eq!(shape(&plan(&s, &idx, 1, 16)), vec![vec![0, 1, 2, 3]]);
        // Budget 0: one micro-batch per pass; a micro-batch over the budget still gets one.
        assert_eq!(plan(&s, &idx, 2, 0).len(), 2);
        assert_eq!(shape(&plan(&s, &idx, 2, 3)), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(plan(&s, &idx, 2, 8)[0], vec![&[0, 1][..]]);
    }
}
