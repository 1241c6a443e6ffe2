//! The PPO update (`docs/ragen-semantics.md` §1 step 6; verl `dp_critic.py::update_critic`,
//! `dp_actor.py::update_policy`): `ppo_epochs` passes over mini-batches of
//! `ppo_mini_batch_size`; in each, the critic and then the actor accumulate gradients over
//! micro-batches of `micro_batch_size` (each loss divided by the number of micro-batches), clip
//! the gradient norm and take one optimiser step. Both use [`accumulate_and_step`].

mod steps;

use crate::advantages::{Estimates, Source, old_logp_metrics};
use crate::batch::TrainSample;
use crate::config::{Config, WarmupStyle};
use crate::metrics::Metrics;
use crate::passes::Pass;
use crate::schedule::{actor_updates_at, is_one_step};
use ragen_gym_policy::{self as pol, Tensor};
use std::collections::BTreeMap;
use std::time::Instant;
use steps::{UpdateBatch, kl_after_update};

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

/// The gradients of one mini-batch, aggregated as verl does (`dp_actor.py::update_policy`,
/// `dp_critic.py::update_critic`): each micro-batch's loss (a token-mean over that micro-batch)
/// is divided by the number of micro-batches `accum` and backpropagated, and the gradients are
/// summed. The micro-batches come in [`passes`]: `losses_of(pass)` runs one forward over the
/// pass and returns each of its micro-batches' losses; their weighted sum is backpropagated once
/// per pass, which gives the same sum of gradients. Returns the summed gradients (`None` for an
/// empty mini-batch) and the summed divided losses.
pub fn accumulate(
    params: &[pol::NamedParam],
    passes: &[Pass<'_>],
    accum: usize,
    mut losses_of: impl FnMut(&Pass<'_>) -> pol::Result<Vec<Tensor>>,
) -> pol::Result<(Option<pol::ParamGrads>, f64)> {
    let mut grads: Option<pol::ParamGrads> = None;
    let mut total = 0.0;
    for pass in passes {
        let mut loss: Option<Tensor> = None;
        for l in losses_of(pass)? {
            let l = (l / accum as f64)?;
            total += f64::from(l.to_dtype(pol::DType::F32)?.to_scalar::<f32>()?);
            loss = Some(match loss {
                None => l,
                Some(sum) => (sum + l)?,
            });
        }
        let Some(loss) = loss else { continue };
        let store = loss.backward()?;
        match &mut grads {
            None => grads = Some(pol::ParamGrads::from_store(store, params)),
            Some(g) => g.accumulate(store, params)?,
        }
    }
    Ok((grads, total))
}

/// One optimiser step over a mini-batch: the gradients of [`accumulate`], their global norm
/// clipped to `grad_clip`, then, when the norm is finite, one step of `opt` with `lr`. Returns
/// the norm before clipping.
pub fn accumulate_and_step(
    params: &[pol::NamedParam],
    opt: &mut pol::AdamW,
    lr: f64,
    grad_clip: f64,
    passes: &[Pass<'_>],
    accum: usize,
    losses_of: impl FnMut(&Pass<'_>) -> pol::Result<Vec<Tensor>>,
) -> pol::Result<f64> {
    let (Some(mut g), _) = accumulate(params, passes, accum, losses_of)? else {
        return Ok(0.0);
    };
    let norm = pol::clip_grad_norm(&mut g, grad_clip)?;
    if norm.is_finite() {
        opt.step(&g, lr)?;
    }
    Ok(norm)
}

/// The schedule of a learning rate `lr` over `total` updates, as verl builds it
/// (`fsdp_workers.py::_build_model_optimizer`): `int(warmup_ratio × total)` warm-up updates.
pub fn schedule(lr: f64, warmup_ratio: f64, style: WarmupStyle, total: u32) -> pol::LrSchedule {
    let warmup_steps = (warmup_ratio * f64::from(total)) as u64;
    match style {
        WarmupStyle::Constant => pol::LrSchedule::WarmupConstant { lr, warmup_steps },
        WarmupStyle::Cosine => pol::LrSchedule::WarmupCosine {
            lr,
            warmup_steps,
            total_steps: u64::from(total),
        },
    }
}

impl LearningRates {
    /// `actor/lr`, and `critic/lr` when a critic trains.
    fn record(&self, m: &mut Metrics, critic: bool) {
        m.insert("actor/lr".into(), self.actor);
        if critic {
            m.insert("critic/lr".into(), self.critic);
        }
    }

    /// The learning rates of iteration `iteration` (1-based). verl steps each scheduler once
    /// per update and logs the rate the update used, so update `u` (0-based) uses the schedule
    /// at `u`: the critic's `u` is `iteration - 1`; the actor's skips the `critic_warmup`
    /// iterations in which it does not update.
    pub fn at(cfg: &Config, iteration: u32) -> Self {
        let total = cfg.trainer.total_training_steps;
        let (a, c) = (&cfg.actor, &cfg.critic);
        let actor = schedule(a.actor_lr, a.lr_warmup_steps_ratio, a.warmup_style, total);
        let critic = schedule(c.critic_lr, c.lr_warmup_steps_ratio, c.warmup_style, total);
        // the actor's first update is at iteration max(critic_warmup, 1) (actor_updates_at)
        let actor_update = iteration.saturating_sub(cfg.trainer.critic_warmup.max(1));
        Self {
            actor: actor.lr_at(u64::from(actor_update)),
            critic: critic.lr_at(u64::from(iteration.saturating_sub(1))),
        }
    }
}

/// Update the critic (when there is one) and, from iteration `trainer.critic_warmup` on, the
/// actor, for iteration `iteration` (1-based; RAGEN `agent_trainer.py::fit` updates the actor
/// when `critic_warmup <= global_steps`). Adds verl's `actor/*` and `critic/*` loss diagnostics
/// (means over micro-batches), `actor/grad_norm`, `critic/grad_norm` (means over steps), the
/// learning rates and `timing_s/update_{critic,actor}`, and `actor/kl_after_update` on the
/// iterations `actor.kl_after_update_freq` divides. `on_progress` gets the actor micro-batches
/// done.
///
/// Estimates that [`crate::advantages::estimate`] left to the update
/// ([`Source::FromUpdate`]) come from its own forwards, which needs the update to be one
/// optimiser step: `old_logp` are the actor's forward detached, `values` the critic's (and then
/// the GAE advantages and returns follow from them before the actor's step);
/// the metrics that the scoring pass would have added ([`old_logp_metrics`], the stats of
/// [`crate::advantages::advantages`]) are added here. Returns the estimates the update used, so
/// completed.
///
/// # Errors
/// Model errors; estimates missing from an update of several optimiser steps.
pub fn update(
    cfg: &Config,
    models: UpdateModels<'_>,
    samples: &[TrainSample],
    est: &Estimates,
    iteration: u32,
    m: &mut Metrics,
    on_progress: &mut dyn FnMut(usize),
) -> pol::Result<Estimates> {
    let lr = LearningRates::at(cfg, iteration);
    let update_actor = actor_updates_at(cfg, iteration);
    let UpdateModels {
        policy,
        actor_opt,
        mut critic,
    } = models;
    let mut est = est.clone();
    let old_from_forward = update_actor && est.sources.old_logp == Source::FromUpdate;
    let from_forward =
        old_from_forward || (critic.is_some() && est.sources.values == Source::FromUpdate);
    check_one_step(cfg, samples.len(), from_forward)?;
    let batch = UpdateBatch {
        cfg,
        samples,
        masks: samples.iter().map(|s| s.loss_mask.clone()).collect(),
        pad_id: policy.tokenizer().im_end_id(),
        device: policy.model().device().clone(),
    };
    let idx: Vec<usize> = (0..samples.len()).collect();
    let mut means = Means::default();
    let (mut t_critic, mut t_actor, mut done) = (0.0, 0.0, 0);
    for _epoch in 0..cfg.actor.ppo_epochs {
        for mb in idx.chunks(cfg.actor.ppo_mini_batch_size) {
            // Critic first (RAGEN / verl order).
            if let Some((c, opt)) = &mut critic {
                let t = Instant::now();
                let norm = batch.critic_step(c, opt, lr.critic, mb, &mut est, &mut means)?;
                means.add("critic/grad_norm", norm);
                t_critic += t.elapsed().as_secs_f64();
            }
            if est.sources.advantages == Source::FromUpdate {
                // GAE on the values of the critic's forward.
                est.estimate_advantages(&cfg.algorithm, samples, m);
            }
            if update_actor {
                let t = Instant::now();
                let mut on_micro = || {
                    done += 1;
                    on_progress(done);
                };
                let norm = batch.actor_step(
                    policy,
                    actor_opt,
                    lr.actor,
                    mb,
                    &mut est,
                    &mut means,
                    &mut on_micro,
                )?;
                means.add("actor/grad_norm", norm);
                t_actor += t.elapsed().as_secs_f64();
            }
        }
    }
    means.into_metrics(m);
    if old_from_forward {
        old_logp_metrics(samples, &est.old_logp, m);
    }
    if update_actor {
        kl_diagnostic(&batch, policy, &est.old_logp, iteration, m)?;
    }
    lr.record(m, critic.is_some());
    m.insert("timing_s/update_critic".into(), t_critic);
    m.insert("timing_s/update_actor".into(), t_actor);
    Ok(est)
}

/// Estimates left to the update's forward (`from_forward`) need the update to be one optimiser
/// step: one epoch, one mini-batch (`docs/ragen-semantics.md` §9).
fn check_one_step(cfg: &Config, samples: usize, from_forward: bool) -> pol::Result<()> {
    if from_forward && !is_one_step(cfg, samples) {
        return Err(pol::PolicyError::InvalidArgument {
            name: "estimates",
            reason: "old log-probs and values come from the update's forward only when it is one \
                     optimiser step"
                .into(),
        });
    }
    Ok(())
}

/// `actor/kl_after_update` on the iterations divisible by `actor.kl_after_update_freq` (0: never):
/// one more forward over the update batch, so not every iteration.
fn kl_diagnostic(
    batch: &UpdateBatch<'_>,
    policy: &pol::Policy,
    old_logp: &[Vec<f32>],
    iteration: u32,
    m: &mut Metrics,
) -> pol::Result<()> {
    let freq = batch.cfg.actor.kl_after_update_freq;
    if freq == 0 || !iteration.is_multiple_of(freq) {
        return Ok(());
    }
    let t = Instant::now();
    let kl = kl_after_update(
        &policy.sampler(),
        batch.cfg,
        batch.samples,
        old_logp,
        batch.pad_id,
    )?;
    m.insert("actor/kl_after_update".into(), kl);
    m.insert("timing_s/kl_after_update".into(), t.elapsed().as_secs_f64());
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

#[cfg(test)]
mod tests {
    use super::steps::{ActorInputs, actor_loss};
    use super::*;
    use ragen_gym_policy::{DType, Device, Var};

    #[test]
    fn aggregation_is_verls_per_micro_batch_token_mean() {
        // verl `dp_actor.py::update_policy` with `loss_agg_mode = token-mean`: micro-batch 1,
        // mini-batch 2, trajectories of 2 and 4 response tokens, advantage +1, ratio 1. Each
        // micro-batch's loss is its token-mean, -1, divided by the 2 micro-batches: the loss is
        // -1.0, and d loss / d logp is -1/2/2 = -0.25 on each token of the first trajectory and
        // -1/4/2 = -0.125 on each of the second (a token-mean over the whole mini-batch would
        // give -1/6 everywhere).
        let cfg = Config::default_config();
        let dev = Device::Cpu;
        let logp = [
            Var::from_tensor(&Tensor::new(&[-0.5f32, -1.0], &dev).unwrap()).unwrap(),
            Var::from_tensor(&Tensor::new(&[-0.2f32, -0.3, -0.4, -0.6], &dev).unwrap()).unwrap(),
        ];
        let params: Vec<pol::NamedParam> = logp
            .iter()
            .enumerate()
            .map(|(i, v)| pol::NamedParam {
                name: format!("logp{i}"),
                var: v.clone(),
            })
            .collect();
        let mut means = Means::default();
        let passes: Vec<Pass<'_>> = vec![vec![&[0][..]], vec![&[1][..]]];
        let (grads, loss) = accumulate(&params, &passes, 2, |pass| {
            let lp = logp[pass[0][0]].as_tensor();
            let ones = Tensor::ones(lp.dims1()?, DType::F32, &dev)?;
            let zeros = ones.zeros_like()?;
            let inputs = ActorInputs {
                logp: lp,
                entropy: &zeros,
                mask: &ones,
                old_logp: &lp.detach(),
                advantages: &ones,
                ref_logp: None,
            };
            Ok(vec![actor_loss(&cfg, &inputs, &mut means)?])
        })
        .unwrap();
        assert_eq!(loss, -1.0);
        let g = grads.unwrap();
        assert_eq!(g.get(0).unwrap().to_vec1::<f32>().unwrap(), vec![-0.25; 2]);
        assert_eq!(g.get(1).unwrap().to_vec1::<f32>().unwrap(), vec![-0.125; 4]);
        // the logged actor/pg_loss is the mean of the micro-batches' token-means
        let mut m = Metrics::new();
        means.into_metrics(&mut m);
        assert_eq!(m["actor/pg_loss"], -1.0);
        assert_eq!(m["actor/ppo_kl"], 0.0);
    }

    #[test]
    fn learning_rates_follow_verl_schedules() {
        // verl's default: constant, no warm-up
        let mut cfg = Config::default_config();
        assert_eq!(
            LearningRates::at(&cfg, 7),
            LearningRates {
                actor: 1e-6,
                critic: 1e-5
            }
        );
        // 4 iterations, warm-up ratio 0.5 -> 2 warm-up updates: 0, lr/2, lr, lr
        cfg.trainer.total_training_steps = 4;
        cfg.actor.actor_lr = 1.0;
        cfg.actor.lr_warmup_steps_ratio = 0.5;
        let actor = |cfg: &Config, it| LearningRates::at(cfg, it).actor;
        assert_eq!([1, 2, 3, 4].map(|it| actor(&cfg, it)), [0.0, 0.5, 1.0, 1.0]);
        // the actor starts counting at its first update, iteration critic_warmup (1 when 0 or 1)
        cfg.trainer.critic_warmup = 1;
        assert_eq!([1, 2, 3].map(|it| actor(&cfg, it)), [0.0, 0.5, 1.0]);
        cfg.trainer.critic_warmup = 2;
        assert_eq!([2, 3, 4].map(|it| actor(&cfg, it)), [0.0, 0.5, 1.0]);
        // cosine without warm-up: 0.5 (1 + cos(pi u / 4)) at u = 0, 2 -> 1, 0.5
        cfg.trainer.critic_warmup = 0;
        cfg.critic.critic_lr = 1.0;
        cfg.critic.warmup_style = WarmupStyle::Cosine;
        let critic = |it| LearningRates::at(&cfg, it).critic;
        assert_eq!(critic(1), 1.0);
        assert!((critic(3) - 0.5).abs() < 1e-12);
    }
}
