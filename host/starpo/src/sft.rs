//! Supervised fine-tuning on expert demonstrations (`ragen-gym sft`): the warm start of RAGEN
//! v1's appendix C (SFT on BFS-solver demonstrations before RL; arXiv 2504.20073), for any env
//! whose plugin has an expert (`ragen:gym/expert`).
//!
//! 1. Demonstrations: [`crate::rollout::expert_rollout`] on the training seeds `seed.train + i`
//!    (the prompts, turn layout and answer format of `train`), or trajectories read from a file.
//! 2. Samples: [`samples::demonstration_samples`], the training sequences `train` builds, with
//!    the tokens of a constrained sampler when `rollout.constrained_actions` is on.
//! 3. Epochs: the samples shuffled (seeded by `seed.sampler` and the epoch), mini-batches of
//!    `batch_size`, micro-batches of `actor.micro_batch_size` packed into shared-prefix passes as
//!    the RL update packs them ([`crate::passes::plan`]); the loss is the token-mean
//!    negative log-likelihood of the trained tokens (cross-entropy on the response tokens only),
//!    minimised by the actor's AdamW with its gradient clip
//!    ([`crate::update::accumulate_and_step`]), its learning rate following the run's
//!    [`SftSchedule`] over all the steps of its epochs.
//!    After each epoch a checkpoint; after every `val_every`-th epoch and the last, the
//!    validation protocol of `train` and the expert's token log-probability (together about half
//!    an epoch's wall time on Sokoban, so long runs validate less often).
//!
//! The run directory is a `train` run directory at iteration 0 (`config.toml`, `run.json`,
//! `checkpoint/`), so `ragen-gym train --resume DIR` continues it with RL. Its checkpoint also
//! records the epochs done, the learning rate, its schedule and the batch size
//! ([`SftProgress`]), so an SFT run that stopped (or one to be taken further) continues with
//! [`SftSetup::resume`]: the same weights, optimiser state, rates and seeded epoch orders, so the
//! epochs after it equal those of a run that never stopped.

pub mod samples;

use crate::action_constraint::action_constraint;
use crate::batch::TrainSample;
use crate::config::{Config, ConfigError};
use crate::error::TrainError;
use crate::events::{Emitter, Phase, Reporter, TrainEvent};
use crate::losses::masked_mean;
use crate::metrics::Metrics;
use crate::models::Models;
use crate::passes::{PassBatch, step_passes};
use crate::policy_adapter::PrefixSharing;
use crate::rollout::{EnvFactory, EnvPool, RolloutParams, answer_joiner, expert_rollout};
use crate::run_dir::{RunDir, RunInfo, RunLock, SftProgress, SftSchedule, TrainerState};
use crate::update::{accumulate_and_step, schedule};
use crate::validation::{ValidationRun, validate_run};
use ragen_gym_core::{Trajectory, splitmix64};
use ragen_gym_policy as pol;
use std::path::PathBuf;
use std::time::Instant;

/// Where the demonstrations come from.
pub enum Demonstrations {
    /// Collect this many episodes of the env's expert.
    Collect(usize),
    /// These trajectories (e.g. read from a `trajectories.jsonl`-shaped file).
    Given(Vec<Trajectory>),
}

/// What an SFT run needs besides the config.
pub struct SftSetup {
    /// The resolved config (the one `train` would use).
    pub config: Config,
    /// Makes env instances.
    pub make_env: EnvFactory,
    /// sha256 of the plugin (recorded in `run.json` and the checkpoint).
    pub plugin_sha256: String,
    /// How the plugin was named (stored in `run.json`, so `train --resume` finds it).
    pub env_source: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Where the policy lives.
    pub device: pol::Device,
    /// The demonstrations.
    pub demonstrations: Demonstrations,
    /// Passes over the demonstrations (in all, the resumed ones included).
    pub epochs: u32,
    /// The peak learning rate (`train`'s `actor.actor_lr` unless set); a resumed run keeps its
    /// own.
    pub lr: f64,
    /// How the learning rate moves over the steps of `epochs`; a resumed run keeps its own (its
    /// decay then ends at this command's last epoch).
    pub schedule: SftSchedule,
    /// Validate (and score the expert's tokens) after every `val_every`-th epoch and after the
    /// last; 1 (or 0): after every epoch.
    pub val_every: u32,
    /// Samples per optimiser step; a resumed run keeps its own.
    pub batch_size: usize,
    /// Continue the SFT run in `run_dir` from its checkpoint (`config`, `run.json` and the
    /// demonstrations are the run's own: pass them as read from it).
    pub resume: bool,
}

/// The SFT run.
pub struct SftTrainer {
    cfg: Config,
    models: Models,
    val_pool: EnvPool,
    constraint: Option<pol::Constraint>,
    prefix_sharing: PrefixSharing,
    run: RunDir,
    info: RunInfo,
    demos: Vec<Trajectory>,
    samples: Vec<TrainSample>,
    epochs: u32,
    lr: f64,
    schedule: SftSchedule,
    batch_size: usize,
    val_every: u32,
    /// Epochs completed (those of the checkpoint when resuming).
    done: u32,
    /// The run directory's lock, held while the trainer lives.
    _lock: RunLock,
}

impl SftTrainer {
    /// Load the model, collect (or take) the demonstrations and build their samples, build the
    /// validation envs, and write `config.toml` and `run.json`.
    ///
    /// # Errors
    /// [`TrainError`]; [`TrainError::Demonstrations`] when the expert fails (e.g. the plugin has
    /// none) or a demonstration does not fit the answer format.
    pub fn new(setup: SftSetup) -> Result<Self, TrainError> {
        let cfg = setup.config;
        if cfg.rollout.constrained_min_actions > 1 {
            // An expert's answer ends where its episode does, so it may hold fewer names.
            return Err(ConfigError::Invalid {
                message: format!(
                    "sft needs rollout.constrained_min_actions = 1, got {}: an expert's answer \
                     stops where its episode ends, with fewer names (set it for `train` after sft)",
                    cfg.rollout.constrained_min_actions
                ),
            }
            .into());
        }
        if !(0.0..=1.0).contains(&setup.schedule.warmup_ratio) {
            return Err(ConfigError::Invalid {
                message: format!(
                    "the sft warm-up ratio (--warmup-ratio) must be in [0, 1], got {}",
                    setup.schedule.warmup_ratio
                ),
            }
            .into());
        }
        let run = RunDir::create(&setup.run_dir)?;
        let lock = run.lock()?;
        let progress = if setup.resume {
            Some(sft_progress(&run)?)
        } else {
            None
        };
        let probe = (setup.make_env)()?;
        let spec = probe.spec().clone();
        drop(probe);
        if progress.is_some() {
            run.check_same_env(&setup.plugin_sha256, &spec.id, &setup.env_source)?;
        }
        let (models, _) = Models::load(&cfg, &run, setup.resume, &setup.device)?;
        let constraint = action_constraint(&cfg, &spec, models.policy.tokenizer())?;
        let p = RolloutParams::from_config(&cfg, &spec, cfg.rollout.temperature, cfg.seed.sampler);
        let demos = match setup.demonstrations {
            Demonstrations::Given(d) => d,
            Demonstrations::Collect(n) => {
                collect(&cfg, &setup.make_env, &models, constraint.is_some(), &p, n)?
            }
        };
        let samples = samples::demonstration_samples(
            models.policy.tokenizer(),
            constraint.as_ref(),
            &p.prompt,
            &demos,
        )
        .map_err(|e| TrainError::Demonstrations(Box::new(e)))?;
        let val_pool = EnvPool::from_factory(&setup.make_env, cfg.val_batch_size())?;
        let prefix_sharing = PrefixSharing::decide(&cfg, &models.policy.sampler());
        let info = RunInfo {
            env_id: spec.id.clone(),
            env_version: spec.version.clone(),
            plugin_sha256: setup.plugin_sha256,
            env_source: setup.env_source,
            model: cfg.model.resolved_path(),
        };
        if progress.is_none() {
            // A resumed run keeps its `run.json` (its model; the checkpoint holds the weights).
            run.write_config(&cfg)?;
            run.write_run_info(&info)?;
        }
        let (lr, schedule, batch_size, done) = match &progress {
            Some(p) => (p.lr, p.schedule, p.batch_size, p.epoch),
            None => (setup.lr, setup.schedule, setup.batch_size.max(1), 0),
        };
        Ok(Self {
            cfg,
            models,
            val_pool,
            constraint,
            prefix_sharing,
            run,
            info,
            demos,
            samples,
            epochs: setup.epochs,
            lr,
            schedule,
            batch_size,
            val_every: setup.val_every.max(1),
            done,
            _lock: lock,
        })
    }

    /// Epochs completed so far.
    pub fn epochs_done(&self) -> u32 {
        self.done
    }

    /// The demonstrations, in order.
    pub fn demonstrations(&self) -> &[Trajectory] {
        &self.demos
    }

    /// The training samples built from them.
    pub fn samples(&self) -> &[TrainSample] {
        &self.samples
    }

    /// The run directory.
    pub fn run_dir(&self) -> &std::path::Path {
        self.run.root()
    }

    /// The mean log-probability of a trained token of the demonstrations under the current
    /// policy (the expert's answers, scored as the RL update scores them), no gradient.
    ///
    /// # Errors
    /// Tensor errors.
    pub fn expert_logp(&self) -> Result<f64, TrainError> {
        Ok(mean_logp(
            &self.models.policy.sampler(),
            &self.samples,
            &self.cfg.actor,
            self.models.pad_id(),
        )?)
    }

    /// [`Self::expert_logp`] as `sft/expert_logp`, and its wall time as `timing_s/expert_logp`.
    fn insert_expert_logp(&self, m: &mut Metrics) -> Result<(), TrainError> {
        let t0 = Instant::now();
        m.insert("sft/expert_logp".into(), self.expert_logp()?);
        m.insert("timing_s/expert_logp".into(), t0.elapsed().as_secs_f64());
        Ok(())
    }

    /// Run every epoch; returns each epoch's metrics (epoch 0: before training, when
    /// `trainer.val_before_train`). Reports the same events as `train`, epochs as iterations.
    ///
    /// # Errors
    /// [`TrainError`] from the update, validation, checkpoint or a reporter.
    pub fn train(&mut self, reporter: &mut dyn Reporter) -> Result<Vec<Metrics>, TrainError> {
        let mut ev = Emitter::new(reporter);
        let resumed = self.done > 0;
        ev.emit(TrainEvent::Started {
            start_iteration: self.done + 1,
            first_logged: if resumed {
                self.done + 1
            } else {
                u32::from(!self.cfg.trainer.val_before_train)
            },
            total: self.epochs,
            resumed,
            trainable_params: self.models.policy.num_trainable(),
            batch: self.samples.len(),
        });
        ev.check()?;
        let mut all = Vec::new();
        if self.cfg.trainer.val_before_train && !resumed {
            let mut m = self.demo_metrics();
            m.insert("sft/epoch".into(), 0.0);
            self.insert_expert_logp(&mut m)?;
            self.validate(0, &mut m, &mut ev)?;
            ev.emit(TrainEvent::Metrics {
                iteration: 0,
                metrics: &m,
            });
            ev.check()?;
            all.push(m);
        }
        for epoch in self.done + 1..=self.epochs {
            let t0 = Instant::now();
            let mut m = self.epoch(epoch, &mut ev)?;
            m.insert("sft/epoch".into(), f64::from(epoch));
            if epoch % self.val_every == 0 || epoch == self.epochs {
                self.insert_expert_logp(&mut m)?;
                self.validate(epoch, &mut m, &mut ev)?;
            }
            m.insert("timing_s/step".into(), t0.elapsed().as_secs_f64());
            // The metrics line goes first, as in `train`: a crash before the checkpoint is
            // complete resumes from the previous epoch, which drops the line and writes it again.
            ev.emit(TrainEvent::Metrics {
                iteration: epoch,
                metrics: &m,
            });
            ev.check()?;
            self.checkpoint(epoch, &mut ev)?;
            self.done = epoch;
            all.push(m);
        }
        ev.emit(TrainEvent::Finished {
            iteration: self.done,
        });
        ev.check()?;
        Ok(all)
    }

    /// How many demonstrations there are and how many the expert solved.
    fn demo_metrics(&self) -> Metrics {
        let mut m = Metrics::new();
        let n = self.demos.len().max(1) as f64;
        let wins = self.demos.iter().filter(|t| t.success).count() as f64;
        m.insert("sft/demonstrations".into(), self.demos.len() as f64);
        m.insert("sft/demo_success".into(), wins / n);
        m.insert("sft/samples".into(), self.samples.len() as f64);
        m
    }

    /// One pass over the samples in a seeded order: `sft/loss` (mean over optimiser steps of
    /// the mini-batch's token-mean NLL, before its step), `sft/grad_norm`, and `actor/lr` (the
    /// rate of the epoch's last step).
    fn epoch(&mut self, epoch: u32, ev: &mut Emitter<'_>) -> Result<Metrics, TrainError> {
        let order = shuffled(self.samples.len(), self.cfg.seed.sampler, epoch);
        let steps: Vec<&[usize]> = order.chunks(self.batch_size).collect();
        let per_epoch = steps.len() as u32;
        let lrs = schedule(
            self.lr,
            self.schedule.warmup_ratio,
            self.schedule.style,
            per_epoch * self.epochs,
        );
        let first_step = u64::from(per_epoch * (epoch - 1));
        let mut lr = self.lr;
        ev.phase(epoch, Phase::Update, steps.len());
        let pad = self.models.pad_id();
        let (mut loss_sum, mut norm_sum) = (0.0, 0.0);
        for (done, mb) in steps.iter().enumerate() {
            lr = lrs.lr_at(first_step + done as u64);
            let policy = &self.models.policy;
            let samples = &self.samples;
            let mut loss = 0.0;
            // As the RL update: consecutive micro-batches share a forward while its distinct
            // tokens fit `actor.max_tokens_per_pass`, so the instruction every demonstration
            // starts with is computed once per pass ([`crate::passes`]).
            let (passes, accum) = step_passes(&self.cfg.actor, samples, mb);
            let device = policy.model().device().clone();
            let norm = accumulate_and_step(
                policy.params(),
                &mut self.models.actor_opt,
                lr,
                self.cfg.actor.grad_clip,
                &passes,
                accum,
                |pass| {
                    let b = PassBatch::new(samples, pass, pad, &device)?;
                    let sc = pol::score(policy.model(), &b.batch)?;
                    let mut out = Vec::with_capacity(pass.len());
                    for mc in pass {
                        let lp = b.pick(&sc.logprobs, mc)?;
                        let nll = masked_mean(&lp, &b.pick(&sc.mask, mc)?)?.neg()?;
                        loss += f64::from(nll.to_scalar::<f32>()?) * mc.len() as f64;
                        out.push(nll);
                    }
                    Ok(out)
                },
            )?;
            loss_sum += loss / mb.len() as f64;
            norm_sum += norm;
            ev.emit(TrainEvent::Progress {
                iteration: epoch,
                phase: Phase::Update,
                done: done + 1,
            });
        }
        ev.check()?;
        let n = steps.len().max(1) as f64;
        let mut m = self.demo_metrics();
        m.insert("sft/loss".into(), loss_sum / n);
        m.insert("sft/grad_norm".into(), norm_sum / n);
        m.insert("actor/lr".into(), lr);
        Ok(m)
    }

    /// The validation of iteration `it` ([`validate_run`]).
    fn validate(
        &mut self,
        it: u32,
        m: &mut Metrics,
        ev: &mut Emitter<'_>,
    ) -> Result<(), TrainError> {
        let run = ValidationRun {
            cfg: &self.cfg,
            models: &self.models,
            constraint: self.constraint.as_ref(),
            prefix_sharing: self.prefix_sharing,
            pool: &mut self.val_pool,
        };
        validate_run(run, it, m, ev)
    }

    /// The checkpoint `train --resume` continues from: iteration 0.
    fn checkpoint(&mut self, epoch: u32, ev: &mut Emitter<'_>) -> Result<(), TrainError> {
        let t = Instant::now();
        ev.phase(epoch, Phase::Checkpoint, 1);
        let state = TrainerState {
            iteration: 0,
            plugin_sha256: self.info.plugin_sha256.clone(),
            env_id: self.info.env_id.clone(),
            sft: Some(SftProgress {
                epoch,
                lr: self.lr,
                batch_size: self.batch_size,
                schedule: self.schedule,
            }),
        };
        self.models.save(&self.run, &state)?;
        ev.emit(TrainEvent::CheckpointSaved {
            iteration: epoch,
            path: &self.run.checkpoint_path(),
            seconds: t.elapsed().as_secs_f64(),
        });
        Ok(ev.check()?)
    }
}

/// Where the SFT run in `run` stands, from its checkpoint: an error naming the run when it has
/// no checkpoint or its checkpoint is not an SFT one (an RL iteration of `train --resume`).
fn sft_progress(run: &RunDir) -> Result<SftProgress, TrainError> {
    pol::recover_interrupted(&run.checkpoint_path())?;
    let not_sft = |why: String| {
        TrainError::Resume(format!(
            "cannot continue {} with sft: {why}",
            run.root().display()
        ))
    };
    let state = match run.checkpoint_state() {
        Ok(Some(state)) => state,
        Ok(None) => {
            return Err(not_sft(
                "it has no checkpoint (no epoch was completed): start it again with `sft --env`"
                    .into(),
            ));
        }
        // `checkpoint/` without its state: this run cannot be continued (a file that does not
        // read stays a run-directory error, as in `train`)
        Err(e) if !run.trainer_state_path().exists() => return Err(not_sft(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    if state.iteration > 0 {
        return Err(not_sft(format!(
            "its checkpoint is RL iteration {} of `train`",
            state.iteration
        )));
    }
    state.sft.ok_or_else(|| {
        not_sft(
            "its checkpoint records no SFT epoch (not written by sft, or before sft recorded \
             its epochs)"
                .into(),
        )
    })
}

/// The mean log-probability of a trained token of `samples` under `model`, in the passes an
/// optimiser step over all of them would take ([`step_passes`]: micro-batches packed while their
/// distinct tokens fit `actor.max_tokens_per_pass`), so the instruction every demonstration starts
/// with is computed once per pass rather than once per demonstration.
fn mean_logp(
    model: &pol::LlamaModel,
    samples: &[TrainSample],
    actor: &crate::config::ActorConfig,
    pad: u32,
) -> pol::Result<f64> {
    let (mut sum, mut n) = (0.0f64, 0.0f64);
    let all: Vec<usize> = (0..samples.len()).collect();
    let device = model.device().clone();
    let (passes, _) = step_passes(actor, samples, &all);
    for pass in passes {
        let b = PassBatch::new(samples, &pass, pad, &device)?;
        let sc = pol::score(model, &b.batch)?;
        sum += f64::from((&sc.logprobs * &sc.mask)?.sum_all()?.to_scalar::<f32>()?);
        n += f64::from(sc.mask.sum_all()?.to_scalar::<f32>()?);
    }
    Ok(if n > 0.0 { sum / n } else { 0.0 })
}

/// `0..n` in the order of epoch `epoch` (Fisher-Yates over splitmix64 seeded by `seed` and the
/// epoch).
fn shuffled(n: usize, seed: u64, epoch: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed ^ (u64::from(epoch) << 32) ^ 0x5f7_0000;
    for i in (1..n).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// `n` expert episodes on the seeds `seed.train + i`, in batches that fit the run's live-instance
/// budget (a pool and its shadows).
fn collect(
    cfg: &Config,
    make_env: &EnvFactory,
    models: &Models,
    constrained: bool,
    p: &RolloutParams,
    n: usize,
) -> Result<Vec<Trajectory>, TrainError> {
    let chunk = ((cfg.train_batch_size() + Config::REPLACEMENT_SLACK) / 2).clamp(1, n.max(1));
    let joiner = answer_joiner(&cfg.agent_proxy.action_sep, constrained);
    let tok = crate::policy_adapter::PolicyTokenizer(models.policy.tokenizer());
    let mut pool = EnvPool::from_factory(make_env, chunk)?;
    let mut shadows = EnvPool::from_factory(make_env, chunk)?;
    let mut demos = Vec::with_capacity(n);
    for start in (0..n).step_by(chunk) {
        let seeds: Vec<(usize, u64)> = (start..n.min(start + chunk))
            .map(|i| (i, cfg.seed.train + i as u64))
            .collect();
        let trajs = expert_rollout(&mut pool, &mut shadows, &seeds, &tok, &joiner, p)
            .map_err(|e| TrainError::Demonstrations(Box::new(e)))?;
        demos.extend(trajs);
    }
    Ok(demos)
}

#[cfg(test)]
mod tests {
    use super::shuffled;

    #[test]
    fn each_epoch_is_a_seeded_permutation() {
        let a = shuffled(50, 7, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(a, shuffled(50, 7, 1));
        assert_ne!(a, shuffled(50, 7, 2));
        assert_ne!(a, shuffled(50, 8, 1));
    }
}
