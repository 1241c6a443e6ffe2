//! The models a run trains and keeps: the actor with its optimiser, the critic with its
//! optimiser (GAE runs), and the frozen reference policy (when a KL term needs it). Loaded from
//! `model.path` or from the run's checkpoint, and saved into it.

use crate::advantages::Scorers;
use crate::config::{AdvEstimator, Config};
use crate::error::TrainError;
use crate::run_dir::{RunDir, RunDirError, TrainerState};
use crate::update::UpdateModels;
use ragen_gym_policy as pol;

/// The models of a run.
pub struct Models {
    /// The actor.
    pub policy: pol::Policy,
    /// The actor's AdamW.
    pub actor_opt: pol::AdamW,
    /// The critic and its AdamW (GAE runs).
    pub critic: Option<(pol::Critic, pol::AdamW)>,
    /// The frozen reference policy (with `use_kl_loss` or `use_kl_in_reward`).
    pub reference: Option<pol::LlamaModel>,
}

fn adamw(lr: f64, weight_decay: f64) -> pol::AdamWConfig {
    pol::AdamWConfig {
        lr,
        weight_decay,
        ..pol::AdamWConfig::default()
    }
}

/// The checkpoint the run in `run` resumes from. None is fine before the first one was written
/// (a crash in the first iterations: the run starts again from `model.path`), but not a
/// checkpoint directory without its `trainer_state.json` ([`RunDir::checkpoint_state`]) nor
/// none at all once `metrics.jsonl` records an iteration past the first checkpoint (that line is
/// written only after the checkpoint of iteration `trainer.save_freq` was complete, so
/// `checkpoint/` was removed).
fn checkpoint_to_resume(cfg: &Config, run: &RunDir) -> Result<Option<TrainerState>, RunDirError> {
    if let Some(state) = run.checkpoint_state()? {
        return Ok(Some(state));
    }
    // the run's own `trainer.save_freq` (its config.toml), not one a `--set` gives the resume
    let sf = run
        .resume_config()
        .and_then(crate::config::ConfigBuilder::build)
        .map_or(cfg.trainer.save_freq, |own| own.trainer.save_freq);
    match run.last_logged_iteration()? {
        Some(last) if sf > 0 && i64::try_from(last).unwrap_or(i64::MAX) > sf => {
            Err(RunDirError::Invalid {
                path: run.checkpoint_path(),
                reason: format!(
                    "missing, yet metrics.jsonl records iteration {last}, written only after \
                     the checkpoint of iteration {sf} (trainer.save_freq) was complete: \
                     restore checkpoint/, or start a new run"
                ),
            })
        }
        _ => Ok(None),
    }
}

/// A resumed run trains what its checkpoint holds: `model.lora_rank` and `model.lora_alpha` may
/// not change (the checkpoint's adapter would be kept and the new values only recorded).
fn same_trainable(
    cfg: &Config,
    had: &pol::Trainable,
    ckpt: &std::path::Path,
) -> Result<(), TrainError> {
    let (rank, alpha) = match had {
        pol::Trainable::Full => (0, cfg.model.lora_alpha),
        pol::Trainable::Lora(l) => (l.rank, l.alpha),
    };
    let m = &cfg.model;
    let differs = if m.lora_rank != rank {
        Some(("model.lora_rank", m.lora_rank.to_string(), rank.to_string()))
    } else if m.lora_rank > 0 && m.lora_alpha != alpha {
        Some((
            "model.lora_alpha",
            m.lora_alpha.to_string(),
            alpha.to_string(),
        ))
    } else {
        None
    };
    match differs {
        Some((key, want, has)) => Err(crate::config::ConfigError::Invalid {
            message: format!(
                "{key} = {want}, but the checkpoint in {} was trained with {has} (rank 0: full \
                 fine-tuning): a resumed run keeps what its checkpoint trains",
                ckpt.display()
            ),
        }
        .into()),
        None => Ok(()),
    }
}

/// A LoRA setting the model cannot take (`lora.rank` past a projection's smaller side) is the
/// config key's fault: [`crate::ConfigError`] naming `model.lora_rank`.
fn lora_config_error(e: pol::PolicyError) -> TrainError {
    match e {
        pol::PolicyError::InvalidArgument {
            name: "lora.rank",
            reason,
        } => crate::config::ConfigError::Invalid {
            message: format!("model.lora_rank: {reason}"),
        }
        .into(),
        e => e.into(),
    }
}

impl Models {
    /// Load fresh models from `model.path`, or, with `resume`, the run's checkpoint (weights,
    /// optimiser states, the iteration it was written after), onto `device`. A run resumed before
    /// its first checkpoint was written (it crashed during the first iterations) starts afresh
    /// from `model.path`. Returns the models and the iterations completed.
    pub fn load(
        cfg: &Config,
        run: &RunDir,
        resume: bool,
        device: &pol::Device,
    ) -> Result<(Self, u32), TrainError> {
        let seed = cfg.seed.sampler;
        let trainable = cfg.model.trainable();
        let ckpt = run.checkpoint_path();
        let state = if resume {
            // A crash between the checkpoint's two renames leaves only `checkpoint.old`.
            pol::recover_interrupted(&ckpt)?;
            checkpoint_to_resume(cfg, run)?
        } else {
            None
        };
        let resume = state.is_some();
        let (mut policy, iteration) = if let Some(state) = state {
            let policy = pol::Policy::from_pretrained_on(&pol::policy_dir(&ckpt), seed, device)?;
            same_trainable(cfg, policy.trainable(), &ckpt)?;
            (policy, state.iteration)
        } else {
            let loaded = pol::load_on(&cfg.model.resolved_path(), device)?;
            let policy = pol::Policy::new(&loaded, trainable.clone(), seed);
            (policy.map_err(lora_config_error)?, 0)
        };
        policy.set_gradient_checkpointing(cfg.model.gradient_checkpointing);
        let a = &cfg.actor;
        let mut actor_opt = pol::AdamW::new(policy.params(), adamw(a.actor_lr, a.weight_decay))?;
        if resume {
            actor_opt.load(&pol::policy_dir(&ckpt))?;
        }
        let critic = if cfg.algorithm.adv_estimator == AdvEstimator::Gae {
            let dir = pol::critic_dir(&ckpt);
            let base = if resume {
                dir.clone()
            } else {
                cfg.model.resolved_path()
            };
            let critic = pol::Critic::new(&pol::load_on(&base, device)?, trainable, seed);
            let mut critic = critic.map_err(lora_config_error)?;
            critic.set_gradient_checkpointing(cfg.model.gradient_checkpointing);
            let c = &cfg.critic;
            let mut opt = pol::AdamW::new(critic.params(), adamw(c.critic_lr, c.weight_decay))?;
            if resume {
                critic.load_trainable(&dir)?;
                opt.load(&dir)?;
            }
            Some((critic, opt))
        } else {
            None
        };
        let reference = if cfg.actor.use_kl_loss || cfg.algorithm.use_kl_in_reward {
            Some(policy.reference()?)
        } else {
            None
        };
        let models = Self {
            policy,
            actor_opt,
            critic,
            reference,
        };
        Ok((models, iteration))
    }

    /// The padding token id (`<|im_end|>`).
    pub fn pad_id(&self) -> u32 {
        self.policy.tokenizer().im_end_id()
    }

    /// The scorers of [`crate::advantages::estimate`], with `actor` the actor's current view.
    pub fn scorers<'a>(&'a self, actor: &'a pol::LlamaModel) -> Scorers<'a> {
        Scorers {
            actor,
            reference: self.reference.as_ref(),
            critic: self.critic.as_ref().map(|(c, _)| c),
            pad_id: self.pad_id(),
        }
    }

    /// What [`crate::update::update`] changes.
    pub fn for_update(&mut self) -> UpdateModels<'_> {
        UpdateModels {
            policy: &self.policy,
            actor_opt: &mut self.actor_opt,
            critic: self.critic.as_mut().map(|(c, o)| (&*c, o)),
        }
    }

    /// Save everything a resume needs into `run`'s checkpoint, atomically.
    pub fn save(&self, run: &RunDir, state: &TrainerState) -> Result<(), TrainError> {
        let state = serde_json::to_value(state).map_err(|e| {
            TrainError::RunDir(crate::run_dir::RunDirError::Invalid {
                path: run.trainer_state_path(),
                reason: e.to_string(),
            })
        })?;
        pol::save_checkpoint(
            &run.checkpoint_path(),
            &pol::CheckpointParts {
                policy: &self.policy,
                policy_optimizer: Some(&self.actor_opt),
                critic: self.critic.as_ref().map(|(c, _)| c),
                critic_optimizer: self.critic.as_ref().map(|(_, o)| o),
                trainer_state: &state,
            },
        )?;
        Ok(())
    }
}
