//! The optimiser steps of one update ([`super::update`]): the critic's and the actor's losses
//! per micro-batch (verl `dp_critic.py::update_critic`, `dp_actor.py::update_policy`), with the
//! old values and old log-probs taken from their own forwards when no scoring pass computed them
//! ([`crate::advantages::ScoringPasses`]), and the `actor/kl_after_update` diagnostic.

use super::{Means, accumulate_and_step};
use crate::advantages::{Estimates, Source, gae, kl_estimate};
use crate::batch::TrainSample;
use crate::batch::tensors::{pad_rows, rows_of, token_batch};
use crate::config::{Config, KlType};
use crate::losses::{ClipParams, kl_tensor, masked_mean, policy_loss, value_loss};
use crate::passes::{self, PassBatch};
use ragen_gym_policy::{self as pol, Tensor};

/// One micro-batch's scores and rows for the actor's loss.
pub(super) struct ActorInputs<'a> {
    /// New log-probs (backpropagating).
    pub(super) logp: &'a Tensor,
    /// Entropy per position (backpropagating).
    pub(super) entropy: &'a Tensor,
    /// The loss mask.
    pub(super) mask: &'a Tensor,
    /// Old log-probs.
    pub(super) old_logp: &'a Tensor,
    /// Advantages.
    pub(super) advantages: &'a Tensor,
    /// Reference log-probs, when the run has a reference.
    pub(super) ref_logp: Option<&'a Tensor>,
}

/// The actor's loss on one micro-batch (verl `dp_actor.py::update_policy`): the PPO clipped
/// surrogate, token-mean over the micro-batch's mask, minus `entropy_coeff` times the masked mean
/// entropy, plus `kl_loss_coef` times the masked mean KL to the reference with `use_kl_loss`.
/// The diagnostics (`actor/pg_loss`, `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl`,
/// `entropy_loss`, `kl_loss`) go into `means`.
pub(super) fn actor_loss(
    cfg: &Config,
    x: &ActorInputs<'_>,
    means: &mut Means,
) -> pol::Result<Tensor> {
    let clip = ClipParams {
        low: cfg.actor.clip_ratio_low,
        high: cfg.actor.clip_ratio_high,
        dual: cfg.actor.clip_ratio_c,
    };
    let pl = policy_loss(x.logp, x.old_logp, x.advantages, x.mask, clip)?;
    let entropy = masked_mean(x.entropy, x.mask)?;
    let mut loss = (&pl.pg_loss - (&entropy * cfg.actor.entropy_coeff)?)?;
    if let Some(r) = x.ref_logp.filter(|_| cfg.actor.use_kl_loss) {
        let kl = masked_mean(&kl_tensor(x.logp, r, cfg.actor.kl_loss_type)?, x.mask)?;
        means.add("actor/kl_loss", f64::from(kl.to_scalar::<f32>()?));
        loss = (loss + (kl * cfg.actor.kl_loss_coef)?)?;
    }
    means.add("actor/pg_loss", f64::from(pl.pg_loss.to_scalar::<f32>()?));
    means.add("actor/pg_clipfrac", f64::from(pl.pg_clipfrac));
    means.add("actor/pg_clipfrac_lower", f64::from(pl.pg_clipfrac_lower));
    means.add("actor/ppo_kl", f64::from(pl.ppo_kl));
    means.add("actor/entropy_loss", f64::from(entropy.to_scalar::<f32>()?));
    Ok(loss)
}

/// What every optimiser step of one update reads: the samples and their loss masks,
/// and how to pad them for the model.
pub(super) struct UpdateBatch<'a> {
    pub(super) cfg: &'a Config,
    pub(super) samples: &'a [TrainSample],
    /// Each sample's loss mask (the rows of the value loss).
    pub(super) masks: Vec<Vec<f32>>,
    pub(super) pad_id: u32,
    pub(super) device: pol::Device,
}

impl UpdateBatch<'_> {
    /// One critic step on mini-batch `mb` (verl `dp_critic.py::update_critic`): the clipped
    /// value loss per micro-batch; `critic/vf_loss`, `vf_clipfrac` and `vpred_mean` go into
    /// `means`. `est.values` left to the update ([`Source::FromUpdate`]) are filled from this step's forward, detached, with each
    /// sample's GAE returns on them. Returns the gradient norm.
    pub(super) fn critic_step(
        &self,
        critic: &pol::Critic,
        opt: &mut pol::AdamW,
        lr: f64,
        mb: &[usize],
        est: &mut Estimates,
        means: &mut Means,
    ) -> pol::Result<f64> {
        let cfg = self.cfg;
        let from_forward = est.sources.values == Source::FromUpdate;
        let (gamma, lam) = (cfg.algorithm.gamma as f32, cfg.algorithm.lam as f32);
        let mut fresh = Vec::new();
        let old: &Estimates = est;
        let (passes, accum) = passes::step_passes(&self.cfg.actor, self.samples, mb);
        let norm = accumulate_and_step(
            critic.params(),
            opt,
            lr,
            cfg.critic.grad_clip,
            &passes,
            accum,
            |pass| {
                let b = PassBatch::new(self.samples, pass, self.pad_id, &self.device)?;
                let all = critic.values(&b.batch)?.narrow(1, 0, b.width())?;
                let mut losses = Vec::with_capacity(pass.len());
                for mc in pass {
                    let mask = b.rows(&self.masks, mc)?;
                    let vpred = b.pick(&all, mc)?;
                    let (values, returns) = if from_forward {
                        let refs: Vec<&TrainSample> =
                            mc.iter().map(|&i| &self.samples[i]).collect();
                        let rows = rows_of(&vpred.detach(), &refs)?;
                        let rets: Vec<Vec<f32>> = rows
                            .iter()
                            .zip(&refs)
                            .map(|(v, s)| gae(&s.token_rewards, v, &s.loss_mask, gamma, lam).1)
                            .collect();
                        let rets: Vec<&[f32]> = rets.iter().map(Vec::as_slice).collect();
                        fresh.extend(rows);
                        (vpred.detach(), pad_rows(&rets, b.width(), &self.device)?)
                    } else {
                        (b.rows(&old.values, mc)?, b.rows(&old.returns, mc)?)
                    };
                    let vl =
                        value_loss(&vpred, &values, &returns, &mask, cfg.critic.cliprange_value)?;
                    means.add("critic/vf_loss", f64::from(vl.vf_loss.to_scalar::<f32>()?));
                    means.add("critic/vf_clipfrac", f64::from(vl.vf_clipfrac));
                    let vpred_mean = masked_mean(&vpred, &mask)?.to_scalar::<f32>()?;
                    means.add("critic/vpred_mean", f64::from(vpred_mean));
                    losses.push(vl.vf_loss);
                }
                Ok(losses)
            },
        )?;
        if from_forward {
            est.values = fresh;
            est.sources.values = Source::Scored;
        }
        Ok(norm)
    }

    /// One actor step on mini-batch `mb` (verl `dp_actor.py::update_policy`): [`actor_loss`]
    /// per micro-batch, each reported to `on_micro` when done. `est.old_logp` left to the update are filled
    /// from this step's forward, detached (PPO's ratio is then exactly 1). Returns the gradient
    /// norm.
    #[expect(
        clippy::too_many_arguments,
        reason = "one step's models, rate, rows, estimates and reports"
    )]
    pub(super) fn actor_step(
        &self,
        policy: &pol::Policy,
        opt: &mut pol::AdamW,
        lr: f64,
        mb: &[usize],
        est: &mut Estimates,
        means: &mut Means,
        on_micro: &mut dyn FnMut(),
    ) -> pol::Result<f64> {
        let cfg = self.cfg;
        let from_forward = est.sources.old_logp == Source::FromUpdate;
        let mut fresh = Vec::new();
        let old: &Estimates = est;
        let (passes, accum) = passes::step_passes(&self.cfg.actor, self.samples, mb);
        let norm = accumulate_and_step(
            policy.params(),
            opt,
            lr,
            cfg.actor.grad_clip,
            &passes,
            accum,
            |pass| {
                let b = PassBatch::new(self.samples, pass, self.pad_id, &self.device)?;
                let sc = pol::score(policy.model(), &b.batch)?;
                let mut losses = Vec::with_capacity(pass.len());
                for mc in pass {
                    let logp = b.pick(&sc.logprobs, mc)?;
                    let old_logp = if from_forward {
                        let lp = logp.detach();
                        let refs: Vec<&TrainSample> =
                            mc.iter().map(|&i| &self.samples[i]).collect();
                        fresh.extend(rows_of(&lp, &refs)?);
                        lp
                    } else {
                        b.rows(&old.old_logp, mc)?
                    };
                    let refs = if old.sources.ref_logp == Source::Absent {
                        None
                    } else {
                        Some(b.rows(&old.ref_logp, mc)?)
                    };
                    let inputs = ActorInputs {
                        logp: &logp,
                        entropy: &b.pick(&sc.entropy, mc)?,
                        mask: &b.pick(&sc.mask, mc)?,
                        old_logp: &old_logp,
                        advantages: &b.rows(&old.advantages, mc)?,
                        ref_logp: refs.as_ref(),
                    };
                    losses.push(actor_loss(cfg, &inputs, means)?);
                    on_micro();
                }
                Ok(losses)
            },
        )?;
        if from_forward {
            est.old_logp = fresh;
            est.sources.old_logp = Source::Scored;
        }
        Ok(norm)
    }
}

/// `actor/kl_after_update`: how far the update moved the policy on its own batch, the k3
/// estimate of KL(pi_old || pi_new) (`exp(new - old) - (new - old) - 1`, never negative, 0 only
/// where the two agree) averaged over the trained tokens, with `new` scored after the last
/// optimiser step. verl's `actor/ppo_kl` is measured before each mini-batch's step, so it is
/// identically 0 with one mini-batch per update; this one is not. It costs a forward over the
/// whole batch, so [`super::update`] runs it only every `actor.kl_after_update_freq` iterations.
pub(super) fn kl_after_update(
    model: &pol::LlamaModel,
    cfg: &Config,
    samples: &[TrainSample],
    old_logp: &[Vec<f32>],
    pad_id: u32,
) -> pol::Result<f64> {
    let (mut sum, mut n) = (0.0f64, 0usize);
    let idx: Vec<usize> = (0..samples.len()).collect();
    let a = &cfg.actor;
    for pass in passes::plan(samples, &idx, a.micro_batch_size, a.max_tokens_per_pass) {
        let pass = passes::indices(&pass);
        let refs: Vec<&TrainSample> = pass.iter().map(|&i| &samples[i]).collect();
        let batch = token_batch(&refs, pad_id)?;
        let new = rows_of(&pol::score(model, &batch)?.logprobs, &refs)?;
        for (&i, row) in pass.iter().zip(&new) {
            for ((lp, old), w) in row.iter().zip(&old_logp[i]).zip(&samples[i].loss_mask) {
                if *w > 0.0 {
                    sum += f64::from(kl_estimate(*old, *lp, KlType::K3));
                    n += 1;
                }
            }
        }
    }
    Ok(if n == 0 { 0.0 } else { sum / n as f64 })
}
