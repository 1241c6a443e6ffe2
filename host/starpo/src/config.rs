//! The training configuration: RAGEN's keys and defaults, layered and strict.
//!
//! Layering (lowest first, [`ConfigBuilder::for_env`] and [`ConfigBuilder::user_layers`]): the
//! embedded `configs/default.toml` -> the CPU profile -> the env's preset -> an experiment file ->
//! `RAGEN_<SECTION>__<KEY>` environment variables -> `--set section.key=value` overrides. Every
//! layer is checked against the default file's keys, so an unknown key is an error that names the
//! key and where it came from; the merged table is then deserialised with `deny_unknown_fields`.

use ragen_gym_core::EnvSpec;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The embedded default configuration, every key commented with RAGEN's default.
pub const DEFAULT_TOML: &str = include_str!("../../../configs/default.toml");
/// CPU profile, applied when no GPU is present (before the env preset).
pub const CPU_PROFILE_TOML: &str = include_str!("../../../configs/cpu.toml");

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
    #[error("failed to read config file {path}: {source}")]
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
    pub max_think_tokens: usize,
    pub prefix_sharing: bool,
    pub prefix_cache_mib: usize,
    pub rollout_filter_ratio: f64,
    pub rollout_filter_type: FilterType,
    pub rollout_filter_strategy: FilterStrategy,
    pub rollout_filter_value: f64,
    pub rollout_filter_include_zero: bool,
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
}

/// Advantage estimator (RAGEN `algorithm.adv_estimator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvEstimator {
    /// GAE with a critic (PPO).
    Gae,
    /// Group-relative outcome advantage, no critic.
    Grpo,
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
    pub clip_ratio_low: f64,
    pub clip_ratio_high: f64,
    pub clip_ratio_c: f64,
    pub entropy_coeff: f64,
    pub use_kl_loss: bool,
    pub kl_loss_coef: f64,
    pub kl_loss_type: KlType,
    pub grad_clip: f64,
    pub weight_decay: f64,
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

/// Builds a [`Config`] from layers, lowest first.
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    merged: toml::Table,
    known: toml::Table,
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// The hardware profile under the env preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `configs/cpu.toml`: RAGEN's shapes scaled down for a few CPU cores.
    Cpu,
    /// RAGEN's own sizes (meant for a GPU).
    Full,
}

/// The table of an env preset that holds the env's CPU-profile settings, e.g.
/// `[cpu.trainer] total_training_steps = 12` in `configs/bandit.toml`: the same sections as
/// any config, applied after the rest of the preset and only with [`Profile::Cpu`], so a GPU run
/// of the same env keeps RAGEN's sizes.
pub const PRESET_CPU_TABLE: &str = "cpu";

/// Parse a config layer's TOML text; `source_name` names it in errors.
fn parse_table(text: &str, source_name: &str) -> Result<toml::Table, ConfigError> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            source_name: source_name.into(),
            message: e.to_string(),
        })
}

/// A built-in env's config preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvPreset<'a> {
    /// The env's name, used in error messages (`the sokoban preset`).
    pub name: &'a str,
    /// The preset's TOML text.
    pub toml: &'a str,
}

impl ConfigBuilder {
    /// The base layers of a run, the same for `train` and `eval`: the embedded default, the CPU
    /// profile (with [`Profile::Cpu`]), then the env's preset when it has one. Add the user's
    /// layers with [`ConfigBuilder::user_layers`].
    pub fn for_env(preset: Option<EnvPreset<'_>>, profile: Profile) -> Result<Self, ConfigError> {
        let mut b = Self::new();
        if profile == Profile::Cpu {
            b = b.layer_str(CPU_PROFILE_TOML, "the CPU profile (configs/cpu.toml)")?;
        }
        match preset {
            Some(p) => b.layer_preset(p, profile),
            None => Ok(b),
        }
    }

    /// Merge an env preset for `profile`. Its `[cpu.<section>]` tables (see
    /// [`PRESET_CPU_TABLE`]) are the env's own CPU settings: they apply on top of the rest of
    /// the preset with [`Profile::Cpu`] only, and are checked for unknown keys either way.
    pub fn layer_preset(
        self,
        preset: EnvPreset<'_>,
        profile: Profile,
    ) -> Result<Self, ConfigError> {
        let source = format!("the {} preset", preset.name);
        let mut table = parse_table(preset.toml, &source)?;
        let cpu = table.remove(PRESET_CPU_TABLE);
        let b = self.layer_table(table, &source)?;
        match cpu {
            None => Ok(b),
            Some(toml::Value::Table(cpu)) => {
                let source = format!(
                    "the [{PRESET_CPU_TABLE}] tables of the {} preset",
                    preset.name
                );
                check_known(&cpu, &b.known, "", &source)?;
                if profile == Profile::Cpu {
                    b.layer_table(cpu, &source)
                } else {
                    Ok(b)
                }
            }
            Some(other) => Err(ConfigError::Parse {
                source_name: source,
                message: format!(
                    "`{PRESET_CPU_TABLE}` must be a table of config sections, not a {}",
                    other.type_str()
                ),
            }),
        }
    }

    /// The user's layers, in order: an experiment `file`, `RAGEN_<SECTION>__<KEY>` variables
    /// (`vars`, usually `std::env::vars()`), then `--set key=value` arguments.
    pub fn user_layers(
        self,
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
        overrides: &[String],
    ) -> Result<Self, ConfigError> {
        let mut b = match file {
            Some(f) => self.layer_file(f)?,
            None => self,
        };
        b = b.layer_env(vars)?;
        for o in overrides {
            b = b.layer_override(o)?;
        }
        Ok(b)
    }

    /// Set a string key to `value` verbatim (no TOML parsing, so quotes and backslashes in it
    /// are safe); `source_name` names the layer in errors.
    pub fn set_str(self, key: &str, value: &str, source_name: &str) -> Result<Self, ConfigError> {
        self.set_value(key, toml::Value::String(value.to_string()), source_name)
    }

    /// Start from the embedded default.
    pub fn new() -> Self {
        let table: toml::Table = DEFAULT_TOML.parse().expect("embedded default.toml parses");
        Self {
            merged: table.clone(),
            known: table,
        }
    }

    /// Merge a TOML text layer; `source_name` names it in errors.
    pub fn layer_str(self, text: &str, source_name: &str) -> Result<Self, ConfigError> {
        self.layer_table(parse_table(text, source_name)?, source_name)
    }

    /// Merge a parsed TOML table; `source_name` names it in errors.
    fn layer_table(mut self, table: toml::Table, source_name: &str) -> Result<Self, ConfigError> {
        check_known(&table, &self.known, "", source_name)?;
        merge(&mut self.merged, table);
        Ok(self)
    }

    /// Merge a TOML file.
    pub fn layer_file(self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.layer_str(&text, &path.display().to_string())
    }

    /// Merge `RAGEN_<SECTION>__<KEY>` variables (`__` separates path parts; names lowercased).
    /// Variables without `__` (such as `RAGEN_LOG`, `RAGEN_GYM_CACHE`) are not config keys.
    pub fn layer_env(
        self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut me = self;
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("RAGEN_") else {
                continue;
            };
            if !rest.contains("__") {
                continue;
            }
            let key = rest
                .split("__")
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(".");
            me = me.set(&key, &value, &format!("environment variable {name}"))?;
        }
        Ok(me)
    }

    /// Apply one `--set key=value` argument.
    pub fn layer_override(self, arg: &str) -> Result<Self, ConfigError> {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(ConfigError::BadOverride { arg: arg.into() });
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(ConfigError::BadOverride { arg: arg.into() });
        }
        self.set(key, value.trim(), &format!("--set {arg}"))
    }

    fn set(self, key: &str, raw: &str, source_name: &str) -> Result<Self, ConfigError> {
        // A value is parsed as TOML (numbers, booleans, quoted strings); anything else is a string.
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        self.set_value(key, value, source_name)
    }

    fn set_value(
        mut self,
        key: &str,
        value: toml::Value,
        source_name: &str,
    ) -> Result<Self, ConfigError> {
        let parts: Vec<&str> = key.split('.').collect();
        let mut known = &self.known;
        for (i, part) in parts.iter().enumerate() {
            match known.get(*part) {
                Some(toml::Value::Table(t)) if i + 1 < parts.len() => known = t,
                Some(v) if i + 1 == parts.len() && !v.is_table() => {}
                _ => {
                    return Err(ConfigError::UnknownKey {
                        key: key.into(),
                        source_name: source_name.into(),
                    });
                }
            }
        }
        let mut table = &mut self.merged;
        for part in &parts[..parts.len() - 1] {
            table = table
                .get_mut(*part)
                .and_then(toml::Value::as_table_mut)
                .expect("checked against the default");
        }
        table.insert(parts[parts.len() - 1].to_string(), value);
        Ok(self)
    }

    /// Deserialise the merged table and check cross-field rules.
    pub fn build(self) -> Result<Config, ConfigError> {
        let cfg: Config =
            self.merged
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    message: e.to_string(),
                })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

fn check_known(
    layer: &toml::Table,
    known: &toml::Table,
    prefix: &str,
    source_name: &str,
) -> Result<(), ConfigError> {
    for (k, v) in layer {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (known.get(k), v) {
            (Some(toml::Value::Table(kt)), toml::Value::Table(vt)) => {
                check_known(vt, kt, &path, source_name)?
            }
            (Some(kv), v) if !kv.is_table() && !v.is_table() => {}
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: path,
                    source_name: source_name.into(),
                });
            }
        }
    }
    Ok(())
}

fn merge(base: &mut toml::Table, layer: toml::Table) {
    for (k, v) in layer {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(bt)), toml::Value::Table(vt)) => merge(bt, vt),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl Config {
    /// The embedded default, unchanged.
    pub fn default_config() -> Self {
        ConfigBuilder::new()
            .build()
            .expect("embedded default.toml is valid")
    }

    /// Serialise back to TOML (the run directory's `config.toml`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }

    /// Cross-field checks (RAGEN `train.py::add_dependency_and_validate_config` assertions).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |message: String| Err(ConfigError::Invalid { message });
        let t = &self.es_manager.train;
        if t.env_groups == 0 || t.group_size == 0 {
            return bad("es_manager.train.env_groups and group_size must be positive".into());
        }
        if self.es_manager.val.env_groups == 0 || self.es_manager.val.group_size == 0 {
            return bad("es_manager.val.env_groups and group_size must be positive".into());
        }
        let a = &self.actor;
        if a.micro_batch_size == 0
            || a.ppo_mini_batch_size == 0
            || !a.ppo_mini_batch_size.is_multiple_of(a.micro_batch_size)
        {
            return bad(format!(
                "actor.micro_batch_size ({}) must divide actor.ppo_mini_batch_size ({})",
                a.micro_batch_size, a.ppo_mini_batch_size
            ));
        }
        let r = self.rollout.rollout_filter_ratio;
        if !(r > 0.0 && r <= 1.0) {
            return bad(format!(
                "rollout.rollout_filter_ratio must be in (0, 1], got {r}"
            ));
        }
        if self.rollout.rollout_filter_strategy == FilterStrategy::TopK
            && ((r * t.env_groups as f64) as usize).max(1) * t.group_size < a.ppo_mini_batch_size
        {
            return bad(format!(
                "env_groups * group_size * rollout_filter_ratio ({}) must be >= actor.ppo_mini_batch_size ({})",
                ((r * t.env_groups as f64) as usize).max(1) * t.group_size,
                a.ppo_mini_batch_size
            ));
        }
        if self.agent_proxy.max_turn == 0 || self.agent_proxy.max_actions_per_turn == 0 {
            return bad("agent_proxy.max_turn and max_actions_per_turn must be positive".into());
        }
        if self.trainer.online_k == 0 || self.actor.ppo_epochs == 0 {
            return bad("trainer.online_k and actor.ppo_epochs must be positive".into());
        }
        if self.rollout.max_think_tokens > 0
            && !(self.rollout.constrained_actions && self.agent_proxy.enable_think)
        {
            return bad(format!(
                "rollout.max_think_tokens = {} needs rollout.constrained_actions = true and \
                 agent_proxy.enable_think = true (the budget closes a thought under constrained decoding)",
                self.rollout.max_think_tokens
            ));
        }
        if self.agent_proxy.use_turn_scores
            && self.agent_proxy.reward_normalization.method != NormMethod::Identity
        {
            return bad(
                "agent_proxy.use_turn_scores = true needs agent_proxy.reward_normalization.method = \
                 \"identity\" (RAGEN normalises only trajectory scores: ctx_manager.py::_normalize_score_tensor)"
                    .into(),
            );
        }
        for (name, r) in [
            ("actor", self.actor.lr_warmup_steps_ratio),
            ("critic", self.critic.lr_warmup_steps_ratio),
        ] {
            if !(0.0..=1.0).contains(&r) {
                return bad(format!(
                    "{name}.lr_warmup_steps_ratio must be in [0, 1], got {r}"
                ));
            }
        }
        if self.rollout.response_length == 0 || self.rollout.generation_batch_size == 0 {
            return bad(
                "rollout.response_length and generation_batch_size must be positive".into(),
            );
        }
        Ok(())
    }

    /// Number of training trajectories per iteration.
    pub fn train_batch_size(&self) -> usize {
        self.es_manager.train.env_groups * self.es_manager.train.group_size
    }

    /// Number of validation trajectories.
    pub fn val_batch_size(&self) -> usize {
        self.es_manager.val.env_groups * self.es_manager.val.group_size
    }

    /// Env instances alive at once in a run: one per training and one per validation
    /// trajectory, plus [`Config::REPLACEMENT_SLACK`] for instances being replaced after a trap.
    /// The sandbox's instance pool is sized from this.
    pub fn live_env_instances(&self) -> usize {
        self.train_batch_size() + self.val_batch_size() + Self::REPLACEMENT_SLACK
    }

    /// Spare env instances for the ones a trap replaces while the old one is being dropped.
    pub const REPLACEMENT_SLACK: usize = 16;

    /// The action budget per trajectory: `agent_proxy.max_actions_per_traj`, or the env's
    /// `max_episode_steps` when that is 0.
    pub fn max_actions_per_traj(&self, spec: &EnvSpec) -> usize {
        match self.agent_proxy.max_actions_per_traj {
            0 => spec.max_episode_steps as usize,
            n => n,
        }
    }

    /// The metric tag: `env.tag`, else the name part of the env id (`ragen/Sokoban-v0` ->
    /// `Sokoban`).
    pub fn env_tag(&self, spec: &EnvSpec) -> String {
        if !self.env.tag.is_empty() {
            return self.env.tag.clone();
        }
        let name = spec.id.rsplit('/').next().unwrap_or(&spec.id);
        name.rsplit_once("-v").map_or(name, |(n, _)| n).to_string()
    }
}

#[cfg(feature = "trainer")]
impl ModelSection {
    /// `model.path` as a path: `default` is the cached SmolLM2-135M-Instruct.
    pub fn resolved_path(&self) -> std::path::PathBuf {
        if self.path == "default" {
            ragen_gym_policy::default_model_path()
        } else {
            std::path::PathBuf::from(&self.path)
        }
    }

    /// What the actor and critic train: everything (`lora_rank = 0`) or LoRA adapters.
    pub fn trainable(&self) -> ragen_gym_policy::Trainable {
        if self.lora_rank == 0 {
            ragen_gym_policy::Trainable::Full
        } else {
            ragen_gym_policy::Trainable::Lora(ragen_gym_policy::LoraConfig {
                rank: self.lora_rank,
                alpha: self.lora_alpha,
                ..ragen_gym_policy::LoraConfig::default()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_has_ragen_values() {
        let c = Config::default_config();
        assert_eq!(c.es_manager.train.env_groups, 8);
        assert_eq!(c.es_manager.train.group_size, 16);
        assert_eq!(c.train_batch_size(), 128);
        assert_eq!(c.rollout.rollout_filter_ratio, 0.25);
        assert_eq!(c.actor.clip_ratio_high, 0.28);
        assert_eq!(c.actor.clip_ratio_c, 3.0);
        assert_eq!(c.algorithm.adv_estimator, AdvEstimator::Gae);
        assert_eq!(c.seed.train, 10000);
        assert_eq!(c.seed.val, 123);
        assert_eq!(c.rollout.max_model_len, 3600);
    }

    #[test]
    fn every_key_in_default_is_commented() {
        // Each `key = value` line must be preceded by a comment line.
        let lines: Vec<&str> = DEFAULT_TOML.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') || l.starts_with('[') {
                continue;
            }
            assert!(
                lines[i - 1].trim().starts_with('#'),
                "key line {} has no comment: {l}",
                i + 1
            );
        }
    }

    #[test]
    fn layers_apply_in_order() {
        let c = ConfigBuilder::new()
            .layer_str(
                "[actor]\nclip_ratio_high = 0.2\n[rollout]\nrollout_filter_ratio = 1.0",
                "exp.toml",
            )
            .unwrap()
            .layer_env([
                (
                    "RAGEN_ACTOR__CLIP_RATIO_HIGH".to_string(),
                    "0.3".to_string(),
                ),
                ("RAGEN_LOG".into(), "x".into()),
            ])
            .unwrap()
            .layer_override("algorithm.adv_estimator=grpo")
            .unwrap()
            .layer_override("env.config={\"a\":1}")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.actor.clip_ratio_high, 0.3);
        assert_eq!(c.rollout.rollout_filter_ratio, 1.0);
        assert_eq!(c.algorithm.adv_estimator, AdvEstimator::Grpo);
        assert_eq!(c.env.config, "{\"a\":1}");
    }

    #[test]
    fn for_env_and_user_layers_follow_the_recipe() {
        let preset = EnvPreset {
            name: "bandit",
            toml: include_str!("../../../configs/bandit.toml"),
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("exp.toml");
        std::fs::write(&file, "[actor]\nppo_epochs = 3\nclip_ratio_high = 0.25\n").unwrap();
        let c = ConfigBuilder::for_env(Some(preset), Profile::Cpu)
            .unwrap()
            .user_layers(
                Some(&file),
                [("RAGEN_ACTOR__PPO_EPOCHS".to_string(), "4".to_string())],
                &["actor.clip_ratio_high=0.3".to_string()],
            )
            .unwrap()
            .set_str("env.config", r#"{"name": "it's \"quoted\""}"#, "--config")
            .unwrap()
            .build()
            .unwrap();
        // the CPU profile and the preset are below, the file below the variable, --set on top
        let cpu = ConfigBuilder::new()
            .layer_str(CPU_PROFILE_TOML, "cpu")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.es_manager.train, cpu.es_manager.train);
        assert_eq!(c.agent_proxy.max_turn, 1, "the bandit preset");
        assert_eq!(c.actor.ppo_epochs, 4);
        assert_eq!(c.actor.clip_ratio_high, 0.3);
        assert_eq!(c.env.config, r#"{"name": "it's \"quoted\""}"#);
        let full = ConfigBuilder::for_env(None, Profile::Full)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(full, Config::default_config());
        assert_eq!(full.live_env_instances(), 128 + 256 + 16);
    }

    #[test]
    fn a_presets_cpu_tables_apply_on_the_cpu_profile_only() {
        let preset = EnvPreset {
            name: "toy",
            toml: "[actor]\nactor_lr = 3e-5\n[cpu.actor]\nactor_lr = 7e-4\n\
                   [cpu.trainer]\ntotal_training_steps = 9\n",
        };
        let build = |profile| {
            ConfigBuilder::for_env(Some(preset), profile)
                .unwrap()
                .build()
                .unwrap()
        };
        let cpu = build(Profile::Cpu);
        assert_eq!(
            (cpu.actor.actor_lr, cpu.trainer.total_training_steps),
            (7e-4, 9)
        );
        let full = build(Profile::Full);
        assert_eq!(
            (full.actor.actor_lr, full.trainer.total_training_steps),
            (3e-5, 200)
        );
        // the CPU tables are checked on every profile; a bad one names the preset and the key
        for profile in [Profile::Cpu, Profile::Full] {
            let bad = EnvPreset {
                name: "toy",
                toml: "[cpu.actor]\nactor_rl = 1e-4\n",
            };
            let e = ConfigBuilder::for_env(Some(bad), profile)
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                "unknown config key `actor.actor_rl` in the [cpu] tables of the toy preset"
            );
        }
        let e = ConfigBuilder::for_env(
            Some(EnvPreset {
                name: "toy",
                toml: "cpu = 1\n",
            }),
            Profile::Cpu,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("the toy preset") && e.contains("`cpu`"), "{e}");
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let e = ConfigBuilder::new()
            .layer_str("[actor]\nclip_ratio_hgh = 0.2", "exp.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "unknown config key `actor.clip_ratio_hgh` in exp.toml");
        let e = ConfigBuilder::new()
            .layer_override("rollout.nope=1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rollout.nope"), "{e}");
        let e = ConfigBuilder::new()
            .layer_override("algorithm.adv_estimator=ppo")
            .unwrap()
            .build()
            .unwrap_err();
        assert!(
            e.to_string().contains("adv_estimator") || e.to_string().contains("ppo"),
            "{e}"
        );
    }

    #[test]
    fn the_think_budget_needs_constrained_thinking() {
        let build = |layer: &str| {
            ConfigBuilder::new()
                .layer_str(layer, "exp.toml")
                .unwrap()
                .build()
        };
        let e = build("[rollout]\nmax_think_tokens = 20\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rollout.max_think_tokens") && e.contains("rollout.constrained_actions"),
            "{e}"
        );
        let e = build(
            "[rollout]\nmax_think_tokens = 20\nconstrained_actions = true\n\
             [agent_proxy]\nenable_think = false\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("agent_proxy.enable_think"), "{e}");
        let c = build("[rollout]\nmax_think_tokens = 20\nconstrained_actions = true\n").unwrap();
        assert_eq!(c.rollout.max_think_tokens, 20);
        // off in the default (RAGEN samples freely)
        assert!(!Config::default_config().rollout.constrained_actions);
    }

    #[test]
    fn shipped_files_are_valid() {
        for (name, text) in [
            ("cpu.toml", CPU_PROFILE_TOML),
            (
                "starpo-ppo.toml",
                include_str!("../../../configs/starpo-ppo.toml"),
            ),
            (
                "starpo-grpo.toml",
                include_str!("../../../configs/starpo-grpo.toml"),
            ),
            (
                "starpo-s.toml",
                include_str!("../../../configs/starpo-s.toml"),
            ),
        ] {
            ConfigBuilder::new()
                .layer_str(text, name)
                .unwrap()
                .build()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
