//! The PPO update (`docs/ragen-semantics.md` §1 step 6; verl `dp_critic.py::update_critic`,
//! `dp_actor.py::update_policy`): `ppo_epochs` passes over mini-batches of
//! `ppo_mini_batch_size`; in each, the critic and then the actor accumulate gradients over
//! micro-batches of `micro_batch_size` (each loss divided by the number of micro-batches), clip
//! the gradient norm and take one optimiser step. Both use [`accumulate_and_step`].

use crate::advantages::Estimates;
use crate::batch::TrainSample;
use crate::batch::tensors::{pad_rows, token_batch};
use crate::config::Config;
use crate::losses::{ClipParams, kl_tensor, masked_mean, policy_loss, value_loss};
use crate::metrics::Metrics;
use ragen_gym_policy::{self as pol, Tensor};
use std::collections::BTreeMap;
use std::time::Instant;

/// The models and optimisers an update changes.
pub struct UpdateModels<'a> {
    /// The actor.
    pub policy: &'a pol::Policy,
    /// The actor's optimiser.
    pub actor_opt: &'a mut pol::AdamW,
    /// The critic and its optimiser (GAE runs).
    pub critic: Option<(&'a pol::Critic, &'a mut pol::AdamW)>,
}

/// The learning rates of this update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearningRates {
    /// The actor's.
    pub actor: f64,
    /// The critic's.
    pub critic: f64,
}

/// Means of per-micro-batch diagnostics (verl averages them over the update).
#[derive(Default)]
struct Means(BTreeMap<&'static str, (f64, f64)>);

impl Means {
    fn add(&mut self, key: &'static str, v: f64) {
        let e = self.0.entry(key).or_insert((0.0, 0.0));
        e.0 += v;
        e.1 += 1.0;
    }

    fn into_metrics(self, m: &mut Metrics) {
        for (k, (s, c)) in self.0 {
            m.insert(k.to_string(), s / c.max(1.0));
        }
    }
}

/// One optimiser step over a mini-batch: for each micro-batch of `micro` indices,
/// `loss_of(indices)` is divided by the number of micro-batches and backpropagated, and the
/// gradients are summed; then the global gradient norm is clipped to `grad_clip` and, when it
/// is finite, `opt` steps with `lr`. Returns the norm before clipping.
pub fn accumulate_and_step(
    params: &[pol::NamedParam],
    opt: &mut pol::AdamW,
    lr: f64,
    grad_clip: f64,
    mini_batch: &[usize],
    micro: usize,
    mut loss_of: impl FnMut(&[usize]) -> pol::Result<Tensor>,
) -> pol::Result<f64> {
    let accum = mini_batch.len().div_ceil(micro) as f64;
    let mut grads: Option<pol::ParamGrads> = None;
    for mc in mini_batch.chunks(micro) {
        let store = (loss_of(mc)? / accum)?.backward()?;
        match &mut grads {
            None => grads = Some(pol::ParamGrads::from_store(store, params)),
            Some(g) => g.accumulate(store, params)?,
        }
    }
    let Some(mut g) = grads else { return Ok(0.0) };
    let norm = pol::clip_grad_norm(&mut g, grad_clip)?;
    if norm.is_finite() {
        opt.step(&g, lr)?;
    }
    Ok(norm)
}

/// A micro-batch as model input: its padded tokens and its per-position rows as tensors.
struct MicroBatch<'a> {
    batch: pol::TokenBatch,
    indices: &'a [usize],
    device: &'a pol::Device,
}

impl<'a> MicroBatch<'a> {
    fn new(
        samples: &[TrainSample],
        indices: &'a [usize],
        pad_id: u32,
        device: &'a pol::Device,
    ) -> pol::Result<Self> {
        let refs: Vec<&TrainSample> = indices.iter().map(|&i| &samples[i]).collect();
        Ok(Self {
            batch: token_batch(&refs, pad_id)?,
            indices,
            device,
        })
    }

    /// Scored positions per row.
    fn width(&self) -> usize {
        self.batch.seq_len() - 1
    }

    /// `rows[i]` of this micro-batch's samples as a `[B, width]` tensor.
    fn rows(&self, rows: &[Vec<f32>]) -> pol::Result<Tensor> {
        let picked: Vec<&[f32]> = self.indices.iter().map(|&i| rows[i].as_slice()).collect();
        pad_rows(&picked, self.width(), self.device)
    }
}

impl LearningRates {
    /// The learning rates of iteration `iteration` (1-based).
    pub fn at(cfg: &Config, _iteration: u32) -> Self {
        Self {
            actor: cfg.actor.actor_lr,
            critic: cfg.critic.critic_lr,
        }
    }
}

/// Update the critic (when there is one) and, past `trainer.critic_warmup` iterations, the
/// actor, for iteration `iteration`. Adds verl's `actor/*` and `critic/*` loss diagnostics (means over micro-batches),
/// `actor/grad_norm`, `critic/grad_norm` (means over steps), the learning rates and
/// `timing_s/update_{critic,actor}`. `on_progress` gets the actor micro-batches done.
pub fn update(
    cfg: &Config,
    models: UpdateModels<'_>,
    samples: &[TrainSample],
    est: &Estimates,
    iteration: u32,
    m: &mut Metrics,
    on_progress: &mut dyn FnMut(usize),
) -> pol::Result<()> {
    let lr = LearningRates::at(cfg, iteration);
    let update_actor = iteration > cfg.trainer.critic_warmup;
    let pad_id = models.policy.tokenizer().im_end_id();
    let (mini, micro) = (cfg.actor.ppo_mini_batch_size, cfg.actor.micro_batch_size);
    let idx: Vec<usize> = (0..samples.len()).collect();
    let device = models.policy.model().device().clone();
    let masks: Vec<Vec<f32>> = samples.iter().map(|s| s.loss_mask.clone()).collect();
    let clip = ClipParams {
        low: cfg.actor.clip_ratio_low,
        high: cfg.actor.clip_ratio_high,
        dual: cfg.actor.clip_ratio_c,
    };
    let UpdateModels {
        policy,
        actor_opt,
        mut critic,
    } = models;
    let mut means = Means::default();
    let (mut t_critic, mut t_actor, mut done) = (0.0, 0.0, 0);
    for _epoch in 0..cfg.actor.ppo_epochs {
        for mb in idx.chunks(mini) {
            // Critic first (RAGEN / verl order).
            if let Some((c, opt)) = &mut critic {
                let t = Instant::now();
                let norm = accumulate_and_step(
                    c.params(),
                    opt,
                    lr.critic,
                    cfg.critic.grad_clip,
                    mb,
                    micro,
                    |mc| {
                        let b = MicroBatch::new(samples, mc, pad_id, &device)?;
                        let mask = b.rows(&masks)?;
                        let vpred = c.values(&b.batch)?.narrow(1, 0, b.width())?;
                        let vl = value_loss(
                            &vpred,
                            &b.rows(&est.values)?,
                            &b.rows(&est.returns)?,
                            &mask,
                            cfg.critic.cliprange_value,
                        )?;
                        means.add("critic/vf_loss", f64::from(vl.vf_loss.to_scalar::<f32>()?));
                        means.add("critic/vf_clipfrac", f64::from(vl.vf_clipfrac));
                        let vpred_mean = masked_mean(&vpred, &mask)?.to_scalar::<f32>()?;
                        means.add("critic/vpred_mean", f64::from(vpred_mean));
                        Ok(vl.vf_loss)
                    },
                )?;
                means.add("critic/grad_norm", norm);
                t_critic += t.elapsed().as_secs_f64();
            }
            if !update_actor {
                continue;
            }
            let t = Instant::now();
            let norm = accumulate_and_step(
                policy.params(),
                actor_opt,
                lr.actor,
                cfg.actor.grad_clip,
                mb,
                micro,
                |mc| {
                    let b = MicroBatch::new(samples, mc, pad_id, &device)?;
                    let sc = pol::score(policy.model(), &b.batch)?;
                    let pl = policy_loss(
                        &sc.logprobs,
                        &b.rows(&est.old_logp)?,
                        &b.rows(&est.advantages)?,
                        &sc.mask,
                        clip,
                    )?;
                    let entropy = masked_mean(&sc.entropy, &sc.mask)?;
                    let mut loss = (&pl.pg_loss - (&entropy * cfg.actor.entropy_coeff)?)?;
                    if cfg.actor.use_kl_loss && !est.ref_logp.is_empty() {
                        let kl = masked_mean(
                            &kl_tensor(
                                &sc.logprobs,
                                &b.rows(&est.ref_logp)?,
                                cfg.actor.kl_loss_type,
                            )?,
                            &sc.mask,
                        )?;
                        means.add("actor/kl_loss", f64::from(kl.to_scalar::<f32>()?));
                        loss = (loss + (kl * cfg.actor.kl_loss_coef)?)?;
                    }
                    means.add("actor/pg_loss", f64::from(pl.pg_loss.to_scalar::<f32>()?));
                    means.add("actor/pg_clipfrac", f64::from(pl.pg_clipfrac));
                    means.add("actor/pg_clipfrac_lower", f64::from(pl.pg_clipfrac_lower));
                    means.add("actor/ppo_kl", f64::from(pl.ppo_kl));
                    means.add("actor/entropy_loss", f64::from(entropy.to_scalar::<f32>()?));
                    done += 1;
                    on_progress(done);
                    Ok(loss)
                },
            )?;
            means.add("actor/grad_norm", norm);
            t_actor += t.elapsed().as_secs_f64();
        }
    }
    means.into_metrics(m);
    m.insert("actor/lr".into(), lr.actor);
    if critic.is_some() {
        m.insert("critic/lr".into(), lr.critic);
    }
    m.insert("timing_s/update_critic".into(), t_critic);
    m.insert("timing_s/update_actor".into(), t_actor);
    Ok(())
}

/// Actor micro-batches of one update (the units of the update phase's progress).
pub fn actor_micro_batches(cfg: &Config, samples: usize) -> usize {
    let (mini, micro) = (cfg.actor.ppo_mini_batch_size, cfg.actor.micro_batch_size);
    let per_epoch: usize = (0..samples)
        .collect::<Vec<_>>()
        .chunks(mini)
        .map(|c| c.len().div_ceil(micro))
        .sum();
    cfg.actor.ppo_epochs as usize * per_epoch
}
