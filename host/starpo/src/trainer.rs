//! The StarPO training loop, top to bottom (`docs/ragen-semantics.md` §1): each iteration rolls
//! out (or reuses the last rollout, Online-k), scores the trajectories (env rewards, format
//! penalty, reward functions, normalisation), keeps the StarPO-S groups, recomputes log-probs and
//! values, estimates advantages, updates critic and actor, then validates and checkpoints when
//! due. Each stage is a function of its own module; the trainer only owns the state and emits
//! [`TrainEvent`]s, which reporters turn into files and progress.

mod collect;

use crate::action_constraint::action_constraint;
use crate::advantages::{ScoringPasses, estimate};
use crate::batch::TrainSample;
use crate::config::Config;
use crate::error::TrainError;
use crate::events::{Emitter as Events, Phase, Reporter, TrainEvent};
use crate::metrics::Metrics;
use crate::models::Models;
use crate::policy_adapter::PrefixSharing;
use crate::rollout::{EnvFactory, EnvPool};
use crate::run_dir::{RunDir, RunInfo, RunLock, TrainerState};
use crate::update::{actor_micro_batches, update};
use crate::validation::{ValidationRun, validate_run};
use ragen_gym_core::RewardFunction;
use ragen_gym_policy as pol;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a training run needs besides the config.
pub struct TrainSetup {
    /// The resolved config.
    pub config: Config,
    /// Makes env instances.
    pub make_env: EnvFactory,
    /// sha256 of the plugin file (recorded in `run.json` and the checkpoint).
    pub plugin_sha256: String,
    /// How the plugin was named (`sokoban`, `path/to/env.wasm`); stored in `run.json` so
    /// `--resume` can find it again.
    pub env_source: String,
    /// Reward-function plugins added to env rewards.
    pub reward_functions: Vec<Box<dyn RewardFunction>>,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Continue from the run directory's checkpoint.
    pub resume: bool,
    /// Where the policy and critic live (`ragen_gym_policy::DeviceSpec::resolve`); a
    /// checkpoint loads onto it whatever device wrote it.
    pub device: ragen_gym_policy::Device,
}

/// The trainer.
pub struct Trainer {
    cfg: Config,
    models: Models,
    train_pool: EnvPool,
    val_pool: EnvPool,
    reward_functions: Vec<Box<dyn RewardFunction>>,
    /// Constrained action decoding (`docs/ragen-semantics.md` §5), when on.
    constraint: Option<pol::Constraint>,
    /// Whether rollouts share prompt prefixes, decided once for the run.
    prefix_sharing: PrefixSharing,
    run: RunDir,
    info: RunInfo,
    resumed: bool,
    /// Iterations completed.
    iteration: u32,
    /// The last rollout's kept samples and metrics (Online-k reuse).
    cached: Option<(Vec<TrainSample>, Metrics)>,
    /// The run directory's lock, held while the trainer lives.
    _lock: RunLock,
}

impl Trainer {
    /// Load the models (or the checkpoint when resuming), build the env pools, and write the
    /// resolved `config.toml` and `run.json`.
    pub fn new(setup: TrainSetup) -> Result<Self, TrainError> {
        let run = RunDir::create(&setup.run_dir)?;
        let lock = run.lock()?;
        let cfg = setup.config;
        let train_pool = EnvPool::from_factory(&setup.make_env, cfg.train_batch_size())?;
        // The resume checks come before anything is written: a refused resume leaves the run
        // as it was.
        if setup.resume {
            let id = &train_pool.spec().id;
            run.check_same_env(&setup.plugin_sha256, id, &setup.env_source)?;
        }
        let (models, iteration) = Models::load(&cfg, &run, setup.resume, &setup.device)?;
        if setup.resume {
            run.check_jsonl_resumable(u64::from(iteration))?;
        }
        let total = cfg.trainer.total_training_steps;
        if total < iteration {
            // it would train nothing and record the smaller total in config.toml
            return Err(crate::config::ConfigError::Invalid {
                message: format!(
                    "trainer.total_training_steps ({total}) is below the {iteration} iterations \
                     the run has done"
                ),
            }
            .into());
        }
        let val_pool = EnvPool::from_factory(&setup.make_env, cfg.val_batch_size())?;
        let constraint = action_constraint(&cfg, train_pool.spec(), models.policy.tokenizer())?;
        let prefix_sharing = PrefixSharing::decide(&cfg, &models.policy.sampler());
        run.write_config(&cfg)?;
        let info = RunInfo {
            env_id: train_pool.spec().id.clone(),
            env_version: train_pool.spec().version.clone(),
            plugin_sha256: setup.plugin_sha256,
            env_source: setup.env_source,
            model: cfg.model.resolved_path(),
        };
        run.write_run_info(&info)?;
        Ok(Self {
            cfg,
            models,
            train_pool,
            val_pool,
            reward_functions: setup.reward_functions,
            constraint,
            prefix_sharing,
            run,
            info,
            resumed: setup.resume,
            iteration,
            cached: None,
            _lock: lock,
        })
    }

    /// Iterations completed.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        self.run.root()
    }

    /// What `run.json` records.
    pub fn run_info(&self) -> &RunInfo {
        &self.info
    }

    /// The policy's model hyper-parameters.
    pub fn model_config(&self) -> &pol::ModelConfig {
        self.models.policy.model().config()
    }

    /// Train until `trainer.total_training_steps`, reporting every event to `reporter`.
    pub fn train(&mut self, reporter: &mut dyn Reporter) -> Result<(), TrainError> {
        let mut ev = Events::new(reporter);
        let total = self.cfg.trainer.total_training_steps;
        let validate_first = self.iteration == 0 && self.cfg.trainer.val_before_train;
        ev.emit(TrainEvent::Started {
            start_iteration: self.iteration + 1,
            first_logged: if validate_first {
                0
            } else {
                self.iteration + 1
            },
            total,
            resumed: self.resumed,
            trainable_params: self.models.policy.num_trainable(),
            batch: self.cfg.train_batch_size(),
        });
        ev.check()?;
        if validate_first {
            let mut m = Metrics::new();
            self.run_validation(0, &mut m, &mut ev)?;
            ev.emit(TrainEvent::Metrics {
                iteration: 0,
                metrics: &m,
            });
            ev.check()?;
        }
        while self.iteration < total {
            let it = self.iteration + 1;
            let t0 = Instant::now();
            let mut m = self.step(it, &mut ev)?;
            let last = it == total;
            let tf = self.cfg.trainer.test_freq;
            if last || (tf > 0 && it.is_multiple_of(tf)) {
                self.run_validation(it, &mut m, &mut ev)?;
            }
            self.iteration = it;
            m.insert("timing_s/step".into(), t0.elapsed().as_secs_f64());
            // The metrics line goes first: a crash before the checkpoint is complete resumes from
            // the previous one, which drops the line and writes it again.
            ev.emit(TrainEvent::Metrics {
                iteration: it,
                metrics: &m,
            });
            ev.check()?;
            let sf = self.cfg.trainer.save_freq;
            if last || (sf > 0 && i64::from(it) % sf == 0) {
                self.checkpoint(it, &mut ev)?;
            }
        }
        ev.emit(TrainEvent::Finished {
            iteration: self.iteration,
        });
        Ok(ev.check()?)
    }

    /// Run one iteration (rollout or Online-k reuse, log-probs, advantages, critic and actor
    /// updates) without validation or checkpoint, reporting its events to `reporter`, and return
    /// its metrics (`timing_s/*` included). For benchmarks such as `ragen-gym bench gpu-check`.
    ///
    /// # Errors
    /// Whatever the iteration's stages return.
    pub fn iterate(&mut self, reporter: &mut dyn Reporter) -> Result<Metrics, TrainError> {
        let mut ev = Events::new(reporter);
        let it = self.iteration + 1;
        let t0 = Instant::now();
        let mut m = self.step(it, &mut ev)?;
        self.iteration = it;
        m.insert("timing_s/step".into(), t0.elapsed().as_secs_f64());
        Ok(m)
    }

    /// One iteration's rollout (or Online-k reuse), log-probs, advantages and update.
    fn step(&mut self, it: u32, ev: &mut Events<'_>) -> Result<Metrics, TrainError> {
        let fresh = (it - 1).is_multiple_of(self.cfg.trainer.online_k);
        let (samples, rollout_metrics) = match self.cached.take() {
            Some((s, mut m)) if !fresh => {
                m.insert("timing_s/gen".into(), 0.0);
                (s, m)
            }
            _ => self.collect(it, ev)?,
        };
        let mut m = rollout_metrics.clone();
        if samples.is_empty() {
            m.insert("actor/skipped_update".into(), 1.0);
        } else {
            ev.phase(it, Phase::LogProbs, samples.len());
            let actor = self.models.policy.sampler();
            let scorers = self.models.scorers(&actor);
            let passes = ScoringPasses::for_update(&self.cfg, samples.len(), it);
            let est = estimate(
                &self.cfg,
                &scorers,
                &samples,
                passes,
                &mut m,
                &mut ev.progress(it, Phase::LogProbs),
            )?;
            ev.check()?;
            ev.phase(
                it,
                Phase::Update,
                actor_micro_batches(&self.cfg, samples.len()),
            );
            let models = self.models.for_update();
            let mut progress = ev.progress(it, Phase::Update);
            let updated = update(&self.cfg, models, &samples, &est, it, &mut m, &mut progress);
            drop(progress);
            updated?;
            ev.check()?;
        }
        self.cached = Some((samples, rollout_metrics));
        Ok(m)
    }

    /// The validation of iteration `it` ([`validate_run`]).
    fn run_validation(
        &mut self,
        it: u32,
        m: &mut Metrics,
        ev: &mut Events<'_>,
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

    /// Save the checkpoint of iteration `it` (its write time goes with `CheckpointSaved`).
    fn checkpoint(&mut self, it: u32, ev: &mut Events<'_>) -> Result<(), TrainError> {
        let t = Instant::now();
        ev.phase(it, Phase::Checkpoint, 1);
        let state = TrainerState {
            iteration: it,
            plugin_sha256: self.info.plugin_sha256.clone(),
            env_id: self.info.env_id.clone(),
            sft: None,
        };
        self.models.save(&self.run, &state)?;
        ev.emit(TrainEvent::CheckpointSaved {
            iteration: it,
            path: &self.run.checkpoint_path(),
            seconds: t.elapsed().as_secs_f64(),
        });
        Ok(ev.check()?)
    }
}
