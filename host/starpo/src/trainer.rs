//! The StarPO training loop (spec §1.3): rollout -> rewards -> StarPO-S filter -> old log-probs,
//! reference log-probs, values -> advantages -> PPO epochs x mini-batches x micro-batches (critic,
//! then actor) -> validation -> metrics -> checkpoint.

use crate::advantages::{gae, grpo_outcome, kl_estimate, masked_whiten, normalize_scores};
use crate::batch::{Sample, build_sample};
use crate::config::{AdvEstimator, Config, ConfigBuilder, NormGrouping};
use crate::context::{PromptConfig, env_prefix};
use crate::events::{Phase, TrainEvent};
use crate::filter::{FilterParams, filter_groups};
use crate::losses::{ClipParams, kl_tensor, masked_mean, policy_loss, value_loss};
use crate::metrics::{Metrics, add_stats, rollout_metrics};
use crate::policy_adapter::{PolicyGenerator, PolicyTokenizer};
use crate::rollout::{EnvPool, RolloutParams, SamplingParams, group_seeds, rollout};
use crate::run_dir::{RunDir, RunDirError};
use candle_core::{Device, Tensor};
use ragen_gym_core::{Env, EnvCallError, EnvSpec, RewardFunction, Trajectory};
use ragen_gym_policy as pol;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Why training failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The policy side failed (model loading, sampling, tensors, checkpoints).
    #[error("policy error: {0}")]
    Policy(#[from] pol::PolicyError),
    /// A tensor operation failed.
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
    /// The run directory could not be written.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// An env could not be created.
    #[error("failed to create env: {0}")]
    Env(#[from] EnvCallError),
    /// Generation or tokenisation failed.
    #[error("{message}")]
    Rollout {
        /// What failed.
        message: String,
    },
    /// A resume directory has no usable checkpoint.
    #[error("cannot resume from {path}: {reason}")]
    Resume {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl From<crate::rollout::RolloutError> for TrainError {
    fn from(e: crate::rollout::RolloutError) -> Self {
        TrainError::Rollout {
            message: e.to_string(),
        }
    }
}

/// Builds one env instance (the sandbox or a native env).
pub type EnvFactory = Box<dyn Fn() -> Result<Box<dyn Env>, EnvCallError>>;

/// What a training run needs besides the config.
pub struct TrainSetup {
    /// The resolved config.
    pub config: Config,
    /// Makes env instances.
    pub make_env: EnvFactory,
    /// sha256 of the plugin file (recorded with each sample trajectory).
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
}

/// Result of the validation protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalResult {
    /// Trajectories run.
    pub episodes: usize,
    /// Fraction that ended with env success.
    pub success_rate: f64,
    /// Mean trajectory score (env rewards + format penalty).
    pub mean_return: f64,
    /// All `val-env/*` metrics.
    pub metrics: Metrics,
    /// The trajectories.
    pub trajectories: Vec<Trajectory>,
}

/// Resolve `model.path` ("default" = the cached SmolLM2-135M-Instruct).
pub fn model_path(cfg: &Config) -> PathBuf {
    if cfg.model.path == "default" {
        pol::default_model_path()
    } else {
        PathBuf::from(&cfg.model.path)
    }
}

fn trainable(cfg: &Config) -> pol::Trainable {
    if cfg.model.lora_rank == 0 {
        pol::Trainable::Full
    } else {
        pol::Trainable::Lora(pol::LoraConfig {
            rank: cfg.model.lora_rank,
            alpha: cfg.model.lora_alpha,
            ..pol::LoraConfig::default()
        })
    }
}

/// The metric tag: `env.tag`, else the name part of the env id (`ragen/Sokoban-v0` -> `Sokoban`).
pub fn env_tag(cfg: &Config, spec: &EnvSpec) -> String {
    if !cfg.env.tag.is_empty() {
        return cfg.env.tag.clone();
    }
    let name = spec.id.rsplit('/').next().unwrap_or(&spec.id);
    name.rsplit_once("-v").map_or(name, |(n, _)| n).to_string()
}

fn prompt_config(cfg: &Config, spec: &EnvSpec) -> PromptConfig {
    PromptConfig {
        system_prompt: cfg.agent_proxy.system_prompt.clone(),
        prefix: env_prefix(
            spec,
            max_actions_per_traj(cfg, spec),
            &cfg.agent_proxy.action_sep,
        ),
        enable_think: cfg.agent_proxy.enable_think,
        response_length: cfg.rollout.response_length,
        max_context_window: cfg.agent_proxy.max_context_window,
    }
}

fn max_actions_per_traj(cfg: &Config, spec: &EnvSpec) -> usize {
    match cfg.agent_proxy.max_actions_per_traj {
        0 => spec.max_episode_steps as usize,
        n => n,
    }
}

fn rollout_params(cfg: &Config, spec: &EnvSpec, temperature: f64, seed: u64) -> RolloutParams {
    RolloutParams {
        prompt: prompt_config(cfg, spec),
        max_turn: cfg.agent_proxy.max_turn,
        max_actions_per_turn: cfg.agent_proxy.max_actions_per_turn,
        max_actions_per_traj: max_actions_per_traj(cfg, spec),
        action_sep: cfg.agent_proxy.action_sep.clone(),
        format_penalty: cfg.es_manager.format_penalty,
        max_model_len: cfg.rollout.max_model_len,
        generation_batch_size: cfg.rollout.generation_batch_size,
        sampling: SamplingParams {
            temperature,
            top_p: cfg.rollout.top_p,
            max_new_tokens: cfg.rollout.response_length,
            seed,
            stop_at_answer: cfg.rollout.stop_at_answer,
        },
        tag: env_tag(cfg, spec),
    }
}

fn make_pool(make_env: &EnvFactory, n: usize) -> Result<EnvPool, TrainError> {
    let envs = (0..n).map(|_| make_env()).collect::<Result<Vec<_>, _>>()?;
    Ok(EnvPool::new(envs))
}

/// Run the validation protocol (spec §6.1): `es_manager.val` groups with fixed seeds
/// `seed.val + i`, temperature `rollout.val_temperature`, the training budgets.
pub fn evaluate(
    cfg: &Config,
    model: &pol::LlamaModel,
    tokenizer: &pol::Tokenizer,
    pool: &mut EnvPool,
    sampler_seed: u64,
    on_progress: &mut dyn FnMut(usize),
) -> Result<EvalResult, TrainError> {
    let v = cfg.es_manager.val;
    let seeds = group_seeds(cfg.seed.val, v.env_groups, v.group_size);
    let p = rollout_params(cfg, pool.spec(), cfg.rollout.val_temperature, sampler_seed);
    let mut generator = PolicyGenerator {
        model: model.detached(),
        tokenizer: PolicyTokenizer(tokenizer),
    };
    let trajs = rollout(pool, &seeds, &mut generator, &p, &mut |pr| {
        on_progress(pr.generated)
    })?;
    let mut metrics = rollout_metrics("val-env", &trajs, v.group_size);
    let tok = PolicyTokenizer(tokenizer);
    let mut lens = Vec::new();
    for (i, t) in trajs.iter().enumerate() {
        if let Some(s) = build_sample(&tok, &p.prompt, t, i, t.score(), false)
            .map_err(|message| TrainError::Rollout { message })?
        {
            lens.push(s.response_tokens() as f64);
        }
    }
    metrics.insert("val-env/response_length".into(), crate::stats::mean(&lens));
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

/// Pad per-sample rows to `[B, width]`.
fn pad_rows(rows: &[&[f32]], width: usize, device: &Device) -> Result<Tensor, TrainError> {
    let mut flat = Vec::with_capacity(rows.len() * width);
    for r in rows {
        flat.extend_from_slice(&r[..r.len().min(width)]);
        flat.extend(std::iter::repeat_n(0.0, width.saturating_sub(r.len())));
    }
    Ok(Tensor::from_vec(flat, (rows.len(), width), device)?)
}

/// Right-padded token batch of samples; the policy's loss mask marks token `t` when response
/// position `t - 1` is trained.
fn token_batch(samples: &[&Sample], pad_id: u32) -> Result<pol::TokenBatch, TrainError> {
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = samples
        .iter()
        .map(|s| {
            let mut lm = vec![0u8];
            lm.extend(s.loss_mask.iter().map(|m| u8::from(*m > 0.0)));
            (s.input_ids.clone(), lm)
        })
        .collect();
    Ok(pol::TokenBatch::right_padded(&seqs, pad_id)?)
}

fn rows_of(t: &Tensor, samples: &[&Sample]) -> Result<Vec<Vec<f32>>, TrainError> {
    let rows: Vec<Vec<f32>> = t.to_vec2()?;
    Ok(rows
        .into_iter()
        .zip(samples)
        .map(|(mut r, s)| {
            r.truncate(s.loss_mask.len());
            r
        })
        .collect())
}

/// Per-sample training arrays (length `L - 1` each).
struct Prepared {
    samples: Vec<Sample>,
    old_logp: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    adv: Vec<Vec<f32>>,
    returns: Vec<Vec<f32>>,
    ref_logp: Vec<Vec<f32>>,
}

/// The trainer.
pub struct Trainer {
    cfg: Config,
    policy: pol::Policy,
    critic: Option<pol::Critic>,
    reference: Option<pol::LlamaModel>,
    actor_opt: pol::AdamW,
    critic_opt: Option<pol::AdamW>,
    train_pool: EnvPool,
    val_pool: EnvPool,
    reward_functions: Vec<Box<dyn RewardFunction>>,
    run: RunDir,
    plugin_sha256: String,
    /// Iterations completed.
    iteration: u32,
    /// The last rollout's kept samples and trajectories (Online-k reuse).
    cached: Option<(Vec<Sample>, Metrics)>,
}

impl Trainer {
    /// Load the model (or the checkpoint when resuming), build env pools and optimisers, write
    /// the resolved config.
    pub fn new(setup: TrainSetup) -> Result<Self, TrainError> {
        let TrainSetup {
            config: cfg,
            make_env,
            plugin_sha256,
            env_source,
            reward_functions,
            run_dir,
            resume,
        } = setup;
        let run = RunDir::create(&run_dir)?;
        let seed = cfg.seed.sampler;
        let tr = trainable(&cfg);
        let ckpt = run.checkpoint_path();
        let (policy, iteration) = if resume {
            // A crash between the checkpoint's two renames leaves only `checkpoint.old`.
            pol::recover_interrupted(&ckpt)?;
            if !ckpt.join("trainer_state.json").exists() {
                return Err(TrainError::Resume {
                    path: run_dir.clone(),
                    reason: "no checkpoint/trainer_state.json".into(),
                });
            }
            let state = pol::read_trainer_state(&ckpt)?;
            let it = state["iteration"]
                .as_u64()
                .ok_or_else(|| TrainError::Resume {
                    path: ckpt.clone(),
                    reason: "trainer_state.json has no iteration".into(),
                })? as u32;
            (
                pol::Policy::from_pretrained(&pol::policy_dir(&ckpt), seed)?,
                it,
            )
        } else {
            let loaded = pol::load(&model_path(&cfg))?;
            (pol::Policy::new(&loaded, tr.clone(), seed)?, 0)
        };
        let adam = |lr: f64, wd: f64| pol::AdamWConfig {
            lr,
            weight_decay: wd,
            ..pol::AdamWConfig::default()
        };
        let mut actor_opt = pol::AdamW::new(
            policy.params(),
            adam(cfg.actor.actor_lr, cfg.actor.weight_decay),
        )?;
        let (critic, critic_opt) = if cfg.algorithm.adv_estimator == AdvEstimator::Gae {
            let loaded = if resume {
                pol::load(&pol::critic_dir(&ckpt))?
            } else {
                pol::load(&model_path(&cfg))?
            };
            let critic = pol::Critic::new(&loaded, tr.clone(), seed)?;
            let mut opt = pol::AdamW::new(
                critic.params(),
                adam(cfg.critic.critic_lr, cfg.critic.weight_decay),
            )?;
            if resume {
                critic.load_trainable(&pol::critic_dir(&ckpt))?;
                opt.load(&pol::critic_dir(&ckpt))?;
            }
            (Some(critic), Some(opt))
        } else {
            (None, None)
        };
        if resume {
            actor_opt.load(&pol::policy_dir(&ckpt))?;
            run.truncate_jsonl_after(&run.metrics_path(), u64::from(iteration))?;
            run.truncate_jsonl_after(&run.trajectories_path(), u64::from(iteration))?;
        }
        let needs_ref = cfg.actor.use_kl_loss || cfg.algorithm.use_kl_in_reward;
        let reference = if needs_ref {
            Some(policy.reference()?)
        } else {
            None
        };
        let train_pool = make_pool(&make_env, cfg.train_batch_size())?;
        let val_pool = make_pool(
            &make_env,
            cfg.es_manager.val.env_groups * cfg.es_manager.val.group_size,
        )?;
        run.write_atomic(&run.config_path(), cfg.to_toml().as_bytes())?;
        let info = serde_json::json!({
            "env_id": train_pool.spec().id,
            "env_version": train_pool.spec().version,
            "plugin_sha256": plugin_sha256,
            "env_source": env_source,
            "model": model_path(&cfg),
        });
        run.write_atomic(
            &run.run_info_path(),
            serde_json::to_string_pretty(&info)
                .unwrap_or_default()
                .as_bytes(),
        )?;
        Ok(Self {
            cfg,
            policy,
            critic,
            reference,
            actor_opt,
            critic_opt,
            train_pool,
            val_pool,
            reward_functions,
            run,
            plugin_sha256,
            iteration,
            cached: None,
        })
    }

    /// Read the resolved config of a run directory (for `--resume`).
    pub fn resume_config(run_dir: &Path) -> Result<ConfigBuilder, TrainError> {
        Ok(ConfigBuilder::new().layer_file(&run_dir.join("config.toml"))?)
    }

    /// Iterations completed.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        self.run.root()
    }

    /// Train until `trainer.total_training_steps`, emitting events.
    pub fn train(&mut self, on_event: &mut dyn FnMut(TrainEvent)) -> Result<(), TrainError> {
        let total = self.cfg.trainer.total_training_steps;
        on_event(TrainEvent::Started {
            start_iteration: self.iteration + 1,
            total,
            trainable_params: self.policy.num_trainable(),
            batch: self.cfg.train_batch_size(),
        });
        if self.iteration == 0 && self.cfg.trainer.val_before_train {
            let mut m = Metrics::new();
            self.validate(0, &mut m, on_event)?;
            self.write_metrics(0, m, on_event)?;
        }
        while self.iteration < total {
            let it = self.iteration + 1;
            let t0 = Instant::now();
            let mut m = self.step(it, on_event)?;
            let last = it == total;
            let tf = self.cfg.trainer.test_freq;
            if last || (tf > 0 && it.is_multiple_of(tf)) {
                self.validate(it, &mut m, on_event)?;
            }
            self.iteration = it;
            let sf = self.cfg.trainer.save_freq;
            if last || (sf > 0 && i64::from(it) % sf == 0) {
                let t = Instant::now();
                on_event(TrainEvent::PhaseStarted {
                    iteration: it,
                    phase: Phase::Checkpoint,
                    units: 1,
                });
                self.save_checkpoint()?;
                m.insert("timing_s/save_checkpoint".into(), t.elapsed().as_secs_f64());
                on_event(TrainEvent::CheckpointSaved {
                    iteration: it,
                    path: self.run.checkpoint_path(),
                });
            }
            m.insert("timing_s/step".into(), t0.elapsed().as_secs_f64());
            self.write_metrics(it, m, on_event)?;
        }
        on_event(TrainEvent::Finished {
            iteration: self.iteration,
        });
        Ok(())
    }

    fn write_metrics(
        &self,
        it: u32,
        m: Metrics,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<(), TrainError> {
        let mut obj = serde_json::Map::new();
        obj.insert("iteration".into(), it.into());
        for (k, v) in &m {
            if v.is_finite() {
                obj.insert(k.clone(), (*v).into());
            }
        }
        self.run
            .append_jsonl(&self.run.metrics_path(), &serde_json::Value::Object(obj))?;
        on_event(TrainEvent::Metrics {
            iteration: it,
            metrics: m,
        });
        Ok(())
    }

    fn save_checkpoint(&self) -> Result<(), TrainError> {
        let state = serde_json::json!({
            "iteration": self.iteration,
            "plugin_sha256": self.plugin_sha256,
            "env_id": self.train_pool.spec().id,
        });
        pol::save_checkpoint(
            &self.run.checkpoint_path(),
            &pol::CheckpointParts {
                policy: &self.policy,
                policy_optimizer: Some(&self.actor_opt),
                critic: self.critic.as_ref(),
                critic_optimizer: self.critic_opt.as_ref(),
                trainer_state: &state,
            },
        )?;
        Ok(())
    }

    fn validate(
        &mut self,
        it: u32,
        m: &mut Metrics,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<(), TrainError> {
        let t = Instant::now();
        let n = self.val_pool.len();
        on_event(TrainEvent::PhaseStarted {
            iteration: it,
            phase: Phase::Validation,
            units: n,
        });
        let model = self.policy.sampler();
        let seed = self
            .cfg
            .seed
            .sampler
            .wrapping_add(0x7a11_0000)
            .wrapping_add(u64::from(it));
        let r = evaluate(
            &self.cfg,
            &model,
            self.policy.tokenizer(),
            &mut self.val_pool,
            seed,
            &mut |done| {
                on_event(TrainEvent::Progress {
                    iteration: it,
                    phase: Phase::Validation,
                    done,
                });
            },
        )?;
        self.log_trajectories(it, "val", &r.trajectories)?;
        m.extend(r.metrics);
        m.insert("timing_s/testing".into(), t.elapsed().as_secs_f64());
        Ok(())
    }

    fn log_trajectories(
        &self,
        it: u32,
        split: &str,
        trajs: &[Trajectory],
    ) -> Result<(), TrainError> {
        for t in trajs
            .iter()
            .take(self.cfg.trainer.log_trajectories as usize)
        {
            let mut v = serde_json::to_value(t).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("iteration".into(), it.into());
                o.insert("split".into(), split.into());
                o.insert("plugin_sha256".into(), self.plugin_sha256.clone().into());
                o.insert("score".into(), t.score().into());
            }
            self.run.append_jsonl(&self.run.trajectories_path(), &v)?;
        }
        Ok(())
    }

    /// Rollout, rewards, filter: the kept samples and rollout metrics.
    fn collect(
        &mut self,
        it: u32,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<(Vec<Sample>, Metrics), TrainError> {
        let cfg = &self.cfg;
        let g = cfg.es_manager.train;
        let rollout_index = u64::from((it - 1) / cfg.trainer.online_k);
        let base = cfg.seed.train + g.env_groups as u64 * rollout_index;
        let seeds = group_seeds(base, g.env_groups, g.group_size);
        let sampler_seed = cfg
            .seed
            .sampler
            .wrapping_add(rollout_index.wrapping_mul(7919));
        let p = rollout_params(
            cfg,
            self.train_pool.spec(),
            cfg.rollout.temperature,
            sampler_seed,
        );
        let t = Instant::now();
        on_event(TrainEvent::PhaseStarted {
            iteration: it,
            phase: Phase::Rollout,
            units: seeds.len(),
        });
        let tokenizer = self.policy.tokenizer().clone();
        let mut generator = PolicyGenerator {
            model: self.policy.sampler(),
            tokenizer: PolicyTokenizer(&tokenizer),
        };
        let mut trajs = rollout(
            &mut self.train_pool,
            &seeds,
            &mut generator,
            &p,
            &mut |pr| {
                on_event(TrainEvent::Progress {
                    iteration: it,
                    phase: Phase::Rollout,
                    done: pr.generated,
                });
            },
        )?;
        let mut m = Metrics::new();
        m.insert("timing_s/gen".into(), t.elapsed().as_secs_f64());
        // Reward-function plugins add to the env rewards.
        for rf in &mut self.reward_functions {
            let mut total = 0.0;
            let mut errors = 0.0;
            for t in &mut trajs {
                match rf.score(t) {
                    Ok(b) if b.total.is_finite() => {
                        t.extra_reward += b.total;
                        total += b.total;
                    }
                    _ => errors += 1.0,
                }
            }
            m.insert(
                format!("reward/{}/mean", rf.name()),
                total / trajs.len().max(1) as f64,
            );
            m.insert(format!("reward/{}/errors", rf.name()), errors);
        }
        m.extend(rollout_metrics("train", &trajs, g.group_size));
        self.log_trajectories(it, "train", &trajs)?;
        // Scores (penalty included), normalised per RAGEN's reward_normalization.
        let raw: Vec<f64> = trajs.iter().map(Trajectory::score).collect();
        let groups: Vec<usize> = match cfg.agent_proxy.reward_normalization.grouping {
            NormGrouping::State => trajs.iter().map(|t| t.group).collect(),
            NormGrouping::Inductive | NormGrouping::Batch => vec![0; trajs.len()],
        };
        let scores = normalize_scores(&raw, &groups, cfg.agent_proxy.reward_normalization.method);
        add_stats(&mut m, "critic/score", &scores);
        let fp = FilterParams {
            ratio: cfg.rollout.rollout_filter_ratio,
            kind: cfg.rollout.rollout_filter_type,
            strategy: cfg.rollout.rollout_filter_strategy,
            top_p: cfg.rollout.rollout_filter_value,
            include_zero: cfg.rollout.rollout_filter_include_zero,
        };
        let out = filter_groups(&scores, g.group_size, &fp);
        m.extend(out.metrics);
        let tok = PolicyTokenizer(&tokenizer);
        let mut samples = Vec::new();
        let mut lens = Vec::new();
        for (i, t) in trajs.iter().enumerate() {
            let s = build_sample(
                &tok,
                &p.prompt,
                t,
                i,
                scores[i],
                cfg.agent_proxy.use_turn_scores,
            )
            .map_err(|message| TrainError::Rollout { message })?;
            if let Some(s) = s {
                lens.push(s.response_tokens() as f64);
                if out.kept_groups.contains(&t.group) && s.response_tokens() > 0 {
                    samples.push(s);
                }
            }
        }
        m.insert("train/response_length".into(), crate::stats::mean(&lens));
        add_stats(&mut m, "response_length", &lens);
        m.insert("rollout/kept_trajectories".into(), samples.len() as f64);
        Ok((samples, m))
    }

    /// One iteration's rollout (or Online-k reuse) and update.
    fn step(
        &mut self,
        it: u32,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<Metrics, TrainError> {
        let fresh = (it - 1).is_multiple_of(self.cfg.trainer.online_k) || self.cached.is_none();
        let (samples, mut m) = if fresh {
            let (s, m) = self.collect(it, on_event)?;
            self.cached = Some((s.clone(), m.clone()));
            (s, m)
        } else {
            let (s, mut m) = self.cached.clone().expect("checked above");
            m.insert("timing_s/gen".into(), 0.0);
            (s, m)
        };
        if samples.is_empty() {
            m.insert("actor/skipped_update".into(), 1.0);
            return Ok(m);
        }
        let prep = self.prepare(it, samples, &mut m, on_event)?;
        self.update(it, &prep, &mut m, on_event)?;
        Ok(m)
    }

    fn pad_id(&self) -> u32 {
        self.policy.tokenizer().im_end_id()
    }

    /// Old log-probs, reference log-probs, values, advantages (spec §1.3 steps 4-5).
    fn prepare(
        &mut self,
        it: u32,
        samples: Vec<Sample>,
        m: &mut Metrics,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<Prepared, TrainError> {
        let t = Instant::now();
        let mb = self.cfg.actor.micro_batch_size;
        on_event(TrainEvent::PhaseStarted {
            iteration: it,
            phase: Phase::Score,
            units: samples.len(),
        });
        let sampler = self.policy.sampler();
        let pad = self.pad_id();
        let (mut old_logp, mut ref_logp, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for chunk in samples.chunks(mb) {
            let refs: Vec<&Sample> = chunk.iter().collect();
            let batch = token_batch(&refs, pad)?;
            let sc = pol::score(&sampler, &batch)?;
            old_logp.extend(rows_of(&sc.logprobs, &refs)?);
            if let Some(r) = &self.reference {
                ref_logp.extend(rows_of(&pol::score(r, &batch)?.logprobs, &refs)?);
            }
            if let Some(c) = &self.critic {
                let v = c.values(&batch)?.detach();
                let tlen = batch.seq_len();
                values.extend(rows_of(&v.narrow(1, 0, tlen - 1)?, &refs)?);
            }
            on_event(TrainEvent::Progress {
                iteration: it,
                phase: Phase::Score,
                done: old_logp.len(),
            });
        }
        m.insert("timing_s/old_log_prob".into(), t.elapsed().as_secs_f64());
        let masked_mean_rows = |rows: &[Vec<f32>]| {
            let (mut s, mut n) = (0.0f64, 0.0f64);
            for (r, smp) in rows.iter().zip(&samples) {
                for (x, w) in r.iter().zip(&smp.loss_mask) {
                    s += f64::from(*x * *w);
                    n += f64::from(*w);
                }
            }
            if n > 0.0 { s / n } else { 0.0 }
        };
        m.insert("rollout/old_log_prob".into(), masked_mean_rows(&old_logp));
        if !ref_logp.is_empty() {
            m.insert("rollout/ref_log_prob".into(), masked_mean_rows(&ref_logp));
        }
        // Token rewards (+ optional KL penalty in the reward).
        let mut rewards: Vec<Vec<f32>> = samples.iter().map(|s| s.token_rewards.clone()).collect();
        if self.cfg.algorithm.use_kl_in_reward && !ref_logp.is_empty() {
            let (coef, kind) = (
                self.cfg.algorithm.kl_coef as f32,
                self.cfg.algorithm.kl_penalty,
            );
            for ((r, s), (o, rf)) in rewards
                .iter_mut()
                .zip(&samples)
                .zip(old_logp.iter().zip(&ref_logp))
            {
                for j in 0..r.len() {
                    r[j] -= coef * kl_estimate(o[j], rf[j], kind) * s.loss_mask[j];
                }
            }
        }
        let t = Instant::now();
        let (adv, returns) = match self.cfg.algorithm.adv_estimator {
            AdvEstimator::Gae => {
                let (g, l) = (
                    self.cfg.algorithm.gamma as f32,
                    self.cfg.algorithm.lam as f32,
                );
                let (mut adv, mut ret) = (Vec::new(), Vec::new());
                for ((r, v), s) in rewards.iter().zip(&values).zip(&samples) {
                    let (a, rt) = gae(r, v, &s.loss_mask, g, l);
                    adv.push(a);
                    ret.push(rt);
                }
                let masks: Vec<Vec<f32>> = samples.iter().map(|s| s.loss_mask.clone()).collect();
                masked_whiten(&mut adv, &masks);
                (adv, ret)
            }
            AdvEstimator::Grpo => {
                let scores: Vec<f64> = rewards
                    .iter()
                    .map(|r| r.iter().map(|x| f64::from(*x)).sum())
                    .collect();
                let groups: Vec<usize> = samples.iter().map(|s| s.group).collect();
                let a = grpo_outcome(
                    &scores,
                    &groups,
                    self.cfg.algorithm.norm_adv_by_std_in_grpo,
                    1e-6,
                );
                let adv: Vec<Vec<f32>> = samples
                    .iter()
                    .zip(&a)
                    .map(|(s, a)| s.loss_mask.iter().map(|w| w * *a as f32).collect())
                    .collect();
                (adv.clone(), adv)
            }
        };
        let flat = |rows: &[Vec<f32>]| -> Vec<f64> {
            rows.iter()
                .zip(&samples)
                .flat_map(|(r, s)| {
                    r.iter()
                        .zip(&s.loss_mask)
                        .filter(|(_, w)| **w > 0.0)
                        .map(|(x, _)| f64::from(*x))
                })
                .collect()
        };
        add_stats(m, "critic/advantages", &flat(&adv));
        add_stats(m, "critic/returns", &flat(&returns));
        if !values.is_empty() {
            add_stats(m, "critic/values", &flat(&values));
        }
        m.insert("timing_s/adv".into(), t.elapsed().as_secs_f64());
        Ok(Prepared {
            samples,
            old_logp,
            values,
            adv,
            returns,
            ref_logp,
        })
    }

    fn update(
        &mut self,
        it: u32,
        p: &Prepared,
        m: &mut Metrics,
        on_event: &mut dyn FnMut(TrainEvent),
    ) -> Result<(), TrainError> {
        let cfg = self.cfg.clone();
        let (mini, micro) = (cfg.actor.ppo_mini_batch_size, cfg.actor.micro_batch_size);
        let n = p.samples.len();
        let idx: Vec<usize> = (0..n).collect();
        let micro_total = cfg.actor.ppo_epochs as usize
            * idx
                .chunks(mini)
                .map(|c| c.len().div_ceil(micro))
                .sum::<usize>();
        on_event(TrainEvent::PhaseStarted {
            iteration: it,
            phase: Phase::Update,
            units: micro_total,
        });
        let device = self.policy.model().device().clone();
        let pad = self.pad_id();
        let clip = ClipParams {
            low: cfg.actor.clip_ratio_low,
            high: cfg.actor.clip_ratio_high,
            dual: cfg.actor.clip_ratio_c,
        };
        let update_actor = it > cfg.trainer.critic_warmup;
        let mut acc: std::collections::BTreeMap<&str, (f64, f64)> = Default::default();
        let mut add = |k: &'static str, v: f64| {
            let e = acc.entry(k).or_insert((0.0, 0.0));
            e.0 += v;
            e.1 += 1.0;
        };
        let (mut t_critic, mut t_actor) = (0.0, 0.0);
        let mut done = 0;
        let masks: Vec<Vec<f32>> = p.samples.iter().map(|s| s.loss_mask.clone()).collect();
        for _epoch in 0..cfg.actor.ppo_epochs {
            for mb in idx.chunks(mini) {
                let accum = mb.len().div_ceil(micro) as f64;
                // Critic first (RAGEN / verl order).
                if let (Some(critic), Some(opt)) = (&self.critic, &mut self.critic_opt) {
                    let t = Instant::now();
                    let mut grads: Option<pol::ParamGrads> = None;
                    for mc in mb.chunks(micro) {
                        let refs: Vec<&Sample> = mc.iter().map(|&i| &p.samples[i]).collect();
                        let batch = token_batch(&refs, pad)?;
                        let w = batch.seq_len() - 1;
                        let rows = |v: &[Vec<f32>]| {
                            pad_rows(
                                &mc.iter().map(|&i| v[i].as_slice()).collect::<Vec<_>>(),
                                w,
                                &device,
                            )
                        };
                        let mask = rows(&masks)?;
                        let vpred = critic.values(&batch)?.narrow(1, 0, w)?;
                        let vl = value_loss(
                            &vpred,
                            &rows(&p.values)?,
                            &rows(&p.returns)?,
                            &mask,
                            cfg.critic.cliprange_value,
                        )?;
                        add("critic/vf_loss", f64::from(vl.vf_loss.to_scalar::<f32>()?));
                        add("critic/vf_clipfrac", f64::from(vl.vf_clipfrac));
                        add(
                            "critic/vpred_mean",
                            f64::from(masked_mean(&vpred, &mask)?.to_scalar::<f32>()?),
                        );
                        let store = (vl.vf_loss / accum)?.backward()?;
                        match &mut grads {
                            None => {
                                grads = Some(pol::ParamGrads::from_store(store, critic.params()))
                            }
                            Some(g) => g.accumulate(store, critic.params())?,
                        }
                    }
                    if let Some(mut g) = grads {
                        let norm = pol::clip_grad_norm(&mut g, cfg.critic.grad_clip)?;
                        add("critic/grad_norm", norm);
                        if norm.is_finite() {
                            opt.step(&g, cfg.critic.critic_lr)?;
                        }
                    }
                    t_critic += t.elapsed().as_secs_f64();
                }
                if !update_actor {
                    continue;
                }
                let t = Instant::now();
                let mut grads: Option<pol::ParamGrads> = None;
                for mc in mb.chunks(micro) {
                    let refs: Vec<&Sample> = mc.iter().map(|&i| &p.samples[i]).collect();
                    let batch = token_batch(&refs, pad)?;
                    let w = batch.seq_len() - 1;
                    let rows = |v: &[Vec<f32>]| {
                        pad_rows(
                            &mc.iter().map(|&i| v[i].as_slice()).collect::<Vec<_>>(),
                            w,
                            &device,
                        )
                    };
                    let sc = pol::score(self.policy.model(), &batch)?;
                    let mask = sc.mask.clone();
                    let pl = policy_loss(
                        &sc.logprobs,
                        &rows(&p.old_logp)?,
                        &rows(&p.adv)?,
                        &mask,
                        clip,
                    )?;
                    let entropy = masked_mean(&sc.entropy, &mask)?;
                    let mut loss = (&pl.pg_loss - (&entropy * cfg.actor.entropy_coeff)?)?;
                    if cfg.actor.use_kl_loss && !p.ref_logp.is_empty() {
                        let kl = masked_mean(
                            &kl_tensor(&sc.logprobs, &rows(&p.ref_logp)?, cfg.actor.kl_loss_type)?,
                            &mask,
                        )?;
                        add("actor/kl_loss", f64::from(kl.to_scalar::<f32>()?));
                        loss = (loss + (kl * cfg.actor.kl_loss_coef)?)?;
                    }
                    add("actor/pg_loss", f64::from(pl.pg_loss.to_scalar::<f32>()?));
                    add("actor/pg_clipfrac", f64::from(pl.pg_clipfrac));
                    add("actor/pg_clipfrac_lower", f64::from(pl.pg_clipfrac_lower));
                    add("actor/ppo_kl", f64::from(pl.ppo_kl));
                    add("actor/entropy_loss", f64::from(entropy.to_scalar::<f32>()?));
                    let store = (loss / accum)?.backward()?;
                    match &mut grads {
                        None => {
                            grads = Some(pol::ParamGrads::from_store(store, self.policy.params()))
                        }
                        Some(g) => g.accumulate(store, self.policy.params())?,
                    }
                    done += 1;
                    on_event(TrainEvent::Progress {
                        iteration: it,
                        phase: Phase::Update,
                        done,
                    });
                }
                if let Some(mut g) = grads {
                    let norm = pol::clip_grad_norm(&mut g, cfg.actor.grad_clip)?;
                    add("actor/grad_norm", norm);
                    if norm.is_finite() {
                        self.actor_opt.step(&g, cfg.actor.actor_lr)?;
                    }
                }
                t_actor += t.elapsed().as_secs_f64();
            }
        }
        for (k, (s, c)) in acc {
            m.insert(k.to_string(), s / c.max(1.0));
        }
        m.insert("actor/lr".into(), cfg.actor.actor_lr);
        if self.critic.is_some() {
            m.insert("critic/lr".into(), cfg.critic.critic_lr);
        }
        m.insert("timing_s/update_critic".into(), t_critic);
        m.insert("timing_s/update_actor".into(), t_actor);
        Ok(())
    }
}
