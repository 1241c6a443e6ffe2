//! The validation protocol (`docs/ragen-semantics.md` §9; RAGEN
//! `ragen/trainer/agent_trainer.py::_validate`): `es_manager.val` groups with the fixed seeds
//! `seed.val + i`, temperature `rollout.val_temperature`, the training budgets.

use crate::batch::build_sample;
use crate::config::Config;
use crate::error::TrainError;
use crate::events::{Emitter, Phase, Split, TrainEvent};
use crate::metrics::{Metrics, rollout_metrics};
use crate::models::Models;
use crate::policy_adapter::{PolicyGenerator, PrefixSharing};
use crate::rollout::{EnvPool, Generator, RolloutError, RolloutParams, rollout};
use crate::seeds::group_seeds;
use crate::seeds::validation_sampler_seed;
use ragen_gym_core::Trajectory;
use std::time::Instant;

/// Result of the validation protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalResult {
    /// Trajectories run.
    pub episodes: usize,
    /// Fraction that ended with env success.
    pub success_rate: f64,
    /// Mean trajectory score (env rewards + format penalty).
    pub mean_return: f64,
    /// All `val-env/*` metrics (and, from [`evaluate`] with prefix sharing on, the sampler's
    /// `val-rollout/*`: `docs/ragen-semantics.md`, "Prefix sharing in rollouts").
    pub metrics: Metrics,
    /// The trajectories.
    pub trajectories: Vec<Trajectory>,
}

/// Run the validation protocol with any [`Generator`] (a candle model, an API model) on `pool`
/// (at least `cfg.val_batch_size()` envs), with rollout settings `p` (from
/// [`RolloutParams::from_config`] at `rollout.val_temperature`, possibly adjusted by the caller).
/// The result's metrics are the rollout's `val-env/*` metrics.
pub fn evaluate_with(
    cfg: &Config,
    generator: &mut dyn Generator,
    p: &RolloutParams,
    pool: &mut EnvPool,
    on_progress: &mut dyn FnMut(usize),
) -> Result<EvalResult, RolloutError> {
    let v = cfg.es_manager.val;
    let seeds = group_seeds(cfg.seed.val, v.env_groups, v.group_size);
    let trajs = rollout(pool, &seeds, generator, p, &mut |pr| {
        on_progress(pr.generated)
    })?;
    let metrics = rollout_metrics("val-env", &trajs, v.group_size);
    let episodes = trajs.len();
    let success_rate = trajs.iter().filter(|t| t.success).count() as f64 / episodes.max(1) as f64;
    let mean_return = trajs.iter().map(Trajectory::score).sum::<f64>() / episodes.max(1) as f64;
    Ok(EvalResult {
        episodes,
        success_rate,
        mean_return,
        metrics,
        trajectories: trajs,
    })
}

/// Run the validation protocol with a candle policy's `generator` ([`PolicyGenerator::new`]:
/// its model, constraint and prefix sharing) on `pool` (at least `cfg.val_batch_size()` envs).
/// `on_progress` gets the prompts sampled so far in the current turn.
pub fn evaluate(
    cfg: &Config,
    generator: &mut PolicyGenerator<'_>,
    pool: &mut EnvPool,
    sampler_seed: u64,
    on_progress: &mut dyn FnMut(usize),
) -> Result<EvalResult, RolloutError> {
    let p = RolloutParams::from_config(cfg, pool.spec(), cfg.rollout.val_temperature, sampler_seed);
    let mut r = evaluate_with(cfg, generator, &p, pool, on_progress)?;
    let mut lens = Vec::new();
    for (i, t) in r.trajectories.iter().enumerate() {
        if let Some(s) = build_sample(&generator.tokenizer, &p.prompt, t, i, t.score(), false)? {
            lens.push(s.response_tokens() as f64);
        }
    }
    r.metrics
        .insert("val-env/response_length".into(), crate::stats::mean(&lens));
    for (k, v) in generator.prefix_sharing_metrics() {
        let k = k.replacen("rollout/", "val-rollout/", 1);
        r.metrics.insert(k, v);
    }
    Ok(r)
}

/// One validation of a run (`train`'s and `sft`'s): the protocol of [`evaluate`] with the
/// policy's current weights, its trajectories emitted as `Val`, and its `val-env/*` metrics and
/// `timing_s/testing` added to `m`.
///
/// # Errors
/// A rollout's error, or a reporter's.
pub(crate) fn validate_run(
    run: ValidationRun<'_>,
    it: u32,
    m: &mut Metrics,
    ev: &mut Emitter<'_>,
) -> Result<(), TrainError> {
    let t = Instant::now();
    ev.phase(it, Phase::Validation, run.pool.len());
    let mut generator = PolicyGenerator::new(
        run.models.policy.rollout_model()?,
        run.models.policy.tokenizer(),
        run.constraint,
        run.prefix_sharing,
    );
    let r = evaluate(
        run.cfg,
        &mut generator,
        run.pool,
        validation_sampler_seed(run.cfg.seed.sampler, it),
        &mut ev.progress(it, Phase::Validation),
    )?;
    ev.emit(TrainEvent::Trajectories {
        iteration: it,
        split: Split::Val,
        trajectories: &r.trajectories,
        groups: &[],
    });
    ev.check()?;
    m.extend(r.metrics);
    m.insert("timing_s/testing".into(), t.elapsed().as_secs_f64());
    Ok(())
}

/// What [`validate_run`] validates with.
pub(crate) struct ValidationRun<'a> {
    pub cfg: &'a Config,
    pub models: &'a Models,
    pub constraint: Option<&'a ragen_gym_policy::Constraint>,
    pub prefix_sharing: PrefixSharing,
    pub pool: &'a mut EnvPool,
}
