//! The training configuration: RAGEN's keys and defaults, layered and strict.
//!
//! This file is the schema: [`Config`] and its sections, one struct per TOML section, each key
//! documented where its default is, in `configs/default.toml`. [`layers`] builds a config from
//! its layers (lowest first, [`ConfigBuilder::for_env`] and [`ConfigBuilder::user_layers`]): the
//! embedded `configs/default.toml` -> the CPU profile -> the env's preset -> an experiment file ->
//! `RAGEN_<SECTION>__<KEY>` environment variables -> `--set section.key=value` overrides. Every
//! layer is checked against the default file's keys, so an unknown key is an error that names the
//! key and where it came from; the merged table is then deserialised with `deny_unknown_fields`.
//! [`checks`] holds the cross-field rules and the values derived from the keys.

mod checks;
mod layers;
#[cfg(test)]
mod tests;

/// Every leaf of the default config with its dotted `section.key` name (test helper).
#[cfg(test)]
pub(crate) fn default_leaves() -> Vec<(String, toml::Value)> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => walk(&key, inner, out),
                _ => out.push((key, v.clone())),
            }
        }
    }
    let table: toml::Table = DEFAULT_TOML.parse().unwrap();
    let mut out = Vec::new();
    walk("", &table, &mut out);
    out
}

pub use layers::{ConfigBuilder, EnvPreset, PRESET_CPU_TABLE, Profile};

use serde::{Deserialize, Serialize};

/// The embedded default configuration, every key commented with RAGEN's default.
pub const DEFAULT_TOML: &str = include_str!("../../../../configs/default.toml");
/// CPU profile, applied when no GPU is present (before the env preset).
pub const CPU_PROFILE_TOML: &str = include_str!("../../../../configs/cpu.toml");

/// Why a configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A layer is not valid TOML.
    #[error("failed to parse {source_name}: {message}")]
    Parse {
        /// File name or layer description.
        source_name: String,
        /// Parser message.
        message: String,
    },
    /// A layer names a key that does not exist.
    #[error("unknown config key `{key}` in {source_name}")]
    UnknownKey {
        /// Dotted key path.
        key: String,
        /// File name or layer description.
        source_name: String,
    },
    /// A `--set` argument is not `key=value`.
    #[error("invalid override `{arg}`: expected section.key=value")]
    BadOverride {
        /// The argument as given.
        arg: String,
    },
    /// The merged table has a wrong type or value.
    #[error("invalid config: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// A config file could not be read.
    #[error("failed to read config file {path}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The full configuration (sections mirror `configs/default.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct Config {
    pub trainer: TrainerConfig,
    pub seed: SeedConfig,
    pub es_manager: EsManagerConfig,
    pub agent_proxy: AgentProxyConfig,
    pub rollout: RolloutConfig,
    pub algorithm: AlgorithmConfig,
    pub actor: ActorConfig,
    pub critic: CriticConfig,
    pub model: ModelSection,
    pub env: EnvConfig,
    pub failure: FailureConfig,
}

/// `[trainer]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct TrainerConfig {
    pub total_training_steps: u32,
    pub test_freq: u32,
    pub val_before_train: bool,
    pub save_freq: i64,
    pub online_k: u32,
    pub critic_warmup: u32,
    pub log_trajectories: u32,
    pub scoring_from_update: bool,
}

/// `[seed]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct SeedConfig {
    pub train: u64,
    pub val: u64,
    pub sampler: u64,
    pub member_offset: bool,
}

/// `[es_manager]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct EsManagerConfig {
    pub format_penalty: f64,
    pub train: GroupsConfig,
    pub val: GroupsConfig,
}

/// `[es_manager.train]` / `[es_manager.val]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct GroupsConfig {
    pub env_groups: usize,
    pub group_size: usize,
}

/// `[agent_proxy]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct AgentProxyConfig {
    pub max_turn: usize,
    pub max_actions_per_turn: usize,
    pub max_actions_per_traj: usize,
    pub action_sep: String,
    pub enable_think: bool,
    pub use_turn_scores: bool,
    pub max_context_window: i64,
    pub system_prompt: String,
    pub reward_normalization: RewardNormalization,
}

/// `[agent_proxy.reward_normalization]` (`docs/ragen-semantics.md` §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct RewardNormalization {
    pub grouping: NormGrouping,
    pub method: NormMethod,
}

/// Which trajectories share normalisation statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormGrouping {
    /// Env group (same seed).
    State,
    /// Env tag (one tag per run here, so the whole batch).
    Inductive,
    /// The whole batch.
    Batch,
}

/// Score normalisation method (RAGEN `reward_normalization.method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormMethod {
    /// Leave scores unchanged.
    Identity,
    /// (x - mean) / (std + 1e-6), unbiased std; zeros when every std <= 1e-6.
    MeanStd,
    /// x - mean.
    Mean,
    /// mean_std clamped to [-1, 3].
    AsymClip,
}

/// `[rollout]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct RolloutConfig {
    pub temperature: f64,
    pub val_temperature: f64,
    pub top_p: f64,
    pub response_length: usize,
    pub max_model_len: usize,
    pub stop_at_answer: bool,
    pub generation_batch_size: usize,
    pub constrained_actions: bool,
    pub constrained_min_actions: usize,
    pub max_think_tokens: usize,
    pub prefix_sharing: bool,
    pub prefix_cache_mib: usize,
    pub expert_agreement: bool,
    pub rollout_filter_ratio: f64,
    pub rollout_filter_type: FilterType,
    pub rollout_filter_strategy: FilterStrategy,
    pub rollout_filter_value: f64,
    pub rollout_filter_include_zero: bool,
    pub branch: BranchConfig,
}

/// `[rollout.branch]`: tree-shaped rollouts ([`crate::rollout::branch`]; `configs/default.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct BranchConfig {
    pub after_turns: Vec<usize>,
    pub count: usize,
}

impl BranchConfig {
    /// Whether any trajectory branches.
    pub fn is_on(&self) -> bool {
        !self.after_turns.is_empty()
    }
}

/// Which end of the std ranking the StarPO-S filter keeps (`docs/ragen-semantics.md` §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterType {
    /// Highest in-group std first.
    Std,
    /// Lowest in-group std first.
    StdRev,
}

/// How many groups the filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterStrategy {
    /// RAGEN v1: `int(ratio * env_groups)` groups.
    TopK,
    /// RAGEN-2: smallest prefix whose std mass reaches `rollout_filter_value`.
    TopP,
}

/// `[algorithm]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct AlgorithmConfig {
    pub adv_estimator: AdvEstimator,
    pub gamma: f64,
    pub lam: f64,
    pub norm_adv_by_std_in_grpo: bool,
    pub use_kl_in_reward: bool,
    pub kl_coef: f64,
    pub kl_penalty: KlType,
    pub gigpo: GigpoConfig,
}

/// `[algorithm.gigpo]`: GiGPO's step level (arXiv 2505.10978, Eqs. 5-8; verl-agent
/// `gigpo/core_gigpo.py`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct GigpoConfig {
    pub gamma: f64,
    pub step_advantage_w: f64,
    pub mode: GigpoMode,
}

/// How GiGPO normalises a step group's returns (verl-agent `algorithm.gigpo.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GigpoMode {
    /// `G - mean` (the paper's normalising factor fixed to 1).
    MeanNorm,
    /// `(G - mean) / (std + 1e-6)`, unbiased std; std 1 in a group of one.
    MeanStdNorm,
}

/// Advantage estimator (RAGEN `algorithm.adv_estimator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvEstimator {
    /// GAE with a critic (PPO).
    Gae,
    /// Group-relative outcome advantage, no critic.
    Grpo,
    /// GRPO's episode advantage plus GiGPO's step-level advantage over anchor-state groups
    /// ([`crate::gigpo`]), no critic.
    Gigpo,
}

/// KL estimator (Schulman's k1 / k3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KlType {
    /// logp - ref_logp.
    K1,
    /// exp(ref - logp) - (ref - logp) - 1.
    K3,
}

/// `[actor]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct ActorConfig {
    pub actor_lr: f64,
    pub lr_warmup_steps_ratio: f64,
    pub warmup_style: WarmupStyle,
    pub ppo_epochs: u32,
    pub ppo_mini_batch_size: usize,
    pub micro_batch_size: usize,
    pub max_tokens_per_pass: usize,
    pub clip_ratio_low: f64,
    pub clip_ratio_high: f64,
    pub clip_ratio_c: f64,
    pub entropy_coeff: f64,
    pub use_kl_loss: bool,
    pub kl_loss_coef: f64,
    pub kl_loss_type: KlType,
    pub grad_clip: f64,
    pub weight_decay: f64,
    pub kl_after_update_freq: u32,
}

/// The learning-rate schedule after warm-up (verl `optim.warmup_style`, from
/// `verl/utils/torch_functional.py::get_constant_schedule_with_warmup` and
/// `get_cosine_schedule_with_warmup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmupStyle {
    /// The configured rate.
    Constant,
    /// Half a cosine from the configured rate down to 0 at the last iteration.
    Cosine,
}

/// `[critic]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct CriticConfig {
    pub critic_lr: f64,
    pub lr_warmup_steps_ratio: f64,
    pub warmup_style: WarmupStyle,
    pub cliprange_value: f64,
    pub grad_clip: f64,
    pub weight_decay: f64,
}

/// `[model]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct ModelSection {
    pub path: String,
    pub lora_rank: usize,
    pub lora_alpha: f64,
    #[serde(default)]
    pub gradient_checkpointing: bool,
}

/// `[failure]`: what a failing env plugin does to a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct FailureConfig {
    pub policy: FailurePolicy,
    pub max_retries: u32,
    pub max_failure_rate: f64,
    pub trajectory_wall_s: f64,
}

impl FailureConfig {
    /// `trajectory_wall_s` as a duration (`None`: 0, no limit).
    pub fn trajectory_wall_budget(&self) -> Option<std::time::Duration> {
        (self.trajectory_wall_s > 0.0)
            .then(|| std::time::Duration::from_secs_f64(self.trajectory_wall_s))
    }
}

/// What a training trajectory ended by a plugin failure (`failure.policy`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Stop the run at the first one.
    FailFast,
    /// Roll its group out again (up to `failure.max_retries` times), then drop it.
    Retry,
    /// Leave its group out of the update.
    DropGroup,
}

/// `[env]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is documented in configs/default.toml"
)]
pub struct EnvConfig {
    pub config: String,
    pub tag: String,
}
