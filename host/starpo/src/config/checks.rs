//! What the keys must satisfy together (RAGEN `train.py::add_dependency_and_validate_config`)
//! and the values derived from them: batch sizes, env instances, the action budget, the metric
//! tag, the model's path and trainable parameters.

#[cfg(feature = "trainer")]
use super::ModelSection;
use super::{Config, ConfigError, FilterStrategy, NormMethod};
use ragen_gym_core::EnvSpec;

impl Config {
    /// Cross-field checks (RAGEN `train.py::add_dependency_and_validate_config` assertions).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |message: String| Err(ConfigError::Invalid { message });
        if let Some((key, x)) = self.non_finite_key() {
            return bad(format!("{key} must be a finite number, got {x}"));
        }
        for (key, x, bound) in [
            (
                "rollout.temperature",
                self.rollout.temperature,
                Bound::AtLeastZero,
            ),
            (
                "rollout.val_temperature",
                self.rollout.val_temperature,
                Bound::AtLeastZero,
            ),
            (
                "rollout.top_p",
                self.rollout.top_p,
                Bound::ZeroToOneOpenBelow,
            ),
            (
                "rollout.rollout_filter_ratio",
                self.rollout.rollout_filter_ratio,
                Bound::ZeroToOneOpenBelow,
            ),
            (
                "failure.max_failure_rate",
                self.failure.max_failure_rate,
                Bound::ZeroToOneOpenBelow,
            ),
            ("actor.actor_lr", self.actor.actor_lr, Bound::AtLeastZero),
            (
                "critic.critic_lr",
                self.critic.critic_lr,
                Bound::AtLeastZero,
            ),
            (
                "actor.weight_decay",
                self.actor.weight_decay,
                Bound::AtLeastZero,
            ),
            (
                "critic.weight_decay",
                self.critic.weight_decay,
                Bound::AtLeastZero,
            ),
            (
                "actor.lr_warmup_steps_ratio",
                self.actor.lr_warmup_steps_ratio,
                Bound::ZeroToOne,
            ),
            (
                "critic.lr_warmup_steps_ratio",
                self.critic.lr_warmup_steps_ratio,
                Bound::ZeroToOne,
            ),
            ("algorithm.gamma", self.algorithm.gamma, Bound::ZeroToOne),
            ("algorithm.lam", self.algorithm.lam, Bound::ZeroToOne),
        ] {
            if !bound.holds(x) {
                return bad(format!("{key} must be {}, got {x}", bound.text()));
            }
        }
        if self.rollout.max_model_len == 0 {
            return bad("rollout.max_model_len must be positive".into());
        }
        if self.rollout.response_length > self.rollout.max_model_len {
            // a response cannot outgrow the context; 2^32 tokens aborted on allocation
            return bad(format!(
                "rollout.response_length ({}) must be at most rollout.max_model_len ({})",
                self.rollout.response_length, self.rollout.max_model_len
            ));
        }
        let t = &self.es_manager.train;
        if t.env_groups == 0 || t.group_size == 0 {
            return bad("es_manager.train.env_groups and group_size must be positive".into());
        }
        if self.es_manager.val.env_groups == 0 || self.es_manager.val.group_size == 0 {
            return bad("es_manager.val.env_groups and group_size must be positive".into());
        }
        for (split, s) in [("train", t), ("val", &self.es_manager.val)] {
            let n = s.env_groups.checked_mul(s.group_size);
            if n.is_none_or(|n| n > Self::MAX_TRAJECTORIES) {
                return bad(format!(
                    "es_manager.{split}.env_groups * group_size ({} x {}) is over the cap of {} \
                     trajectories per iteration",
                    s.env_groups,
                    s.group_size,
                    Self::MAX_TRAJECTORIES
                ));
            }
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
        if self.rollout.rollout_filter_strategy == FilterStrategy::TopK
            && ((r * t.env_groups as f64) as usize).max(1) * t.group_size < a.ppo_mini_batch_size
        {
            return bad(format!(
                "env_groups * group_size * rollout_filter_ratio ({}) must be >= actor.ppo_mini_batch_size ({})",
                ((r * t.env_groups as f64) as usize).max(1) * t.group_size,
                a.ppo_mini_batch_size
            ));
        }
        let f = &self.failure;
        if !(f.trajectory_wall_s >= 0.0 && f.trajectory_wall_s.is_finite()) {
            return bad(format!(
                "failure.trajectory_wall_s must be a finite number of seconds >= 0 (0: no limit), got {}",
                f.trajectory_wall_s
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
        let min = self.rollout.constrained_min_actions;
        if min != 1 && !self.rollout.constrained_actions {
            return bad(format!(
                "rollout.constrained_min_actions = {min} needs rollout.constrained_actions = true \
                 (only constrained decoding can hold an answer open)"
            ));
        }
        if !(1..=self.agent_proxy.max_actions_per_turn).contains(&min) {
            return bad(format!(
                "rollout.constrained_min_actions = {min} must be in 1..=agent_proxy.max_actions_per_turn ({})",
                self.agent_proxy.max_actions_per_turn
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
        let g = &self.algorithm.gigpo;
        if !(0.0..=1.0).contains(&g.gamma) || !g.step_advantage_w.is_finite() {
            return bad(format!(
                "algorithm.gigpo.gamma must be in [0, 1] and step_advantage_w finite, got {} and {}",
                g.gamma, g.step_advantage_w
            ));
        }
        let b = &self.rollout.branch;
        if b.is_on() && b.count == 0 {
            return bad(format!(
                "rollout.branch.count must be >= 1 when rollout.branch.after_turns is set (got \
                 after_turns = {:?})",
                b.after_turns
            ));
        }
        if !b.is_on() && b.count > 0 {
            return bad(format!(
                "rollout.branch.count = {} branches nowhere: set rollout.branch.after_turns too",
                b.count
            ));
        }
        let max_turn = self.agent_proxy.max_turn;
        if let Some(k) = b.after_turns.iter().find(|&&k| k == 0 || k >= max_turn) {
            return bad(format!(
                "rollout.branch.after_turns: {k} is not in [1, agent_proxy.max_turn = {max_turn}): \
                 k counts the turns played before the fork, and a branch needs a turn left to play \
                 (k = 0 would be more group members: es_manager.train.group_size)"
            ));
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

    /// The most trajectories one split may hold per iteration (`env_groups * group_size`):
    /// far above RAGEN's defaults (train 8 x 16, val 256 x 1: `config/base.yaml` `es_manager`, in
    /// `../shared/spec/ragen.md`), low enough that every batch-size product and sum below stays far from `usize` overflow.
    pub const MAX_TRAJECTORIES: usize = 1 << 20;

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

impl Config {
    /// The first key (dotted path, array elements as `key[i]`) whose value is a float that is
    /// NaN or infinite: TOML and `--set` accept `nan` and `inf`, and a NaN learning rate or
    /// coefficient trains every weight to NaN without an error.
    fn non_finite_key(&self) -> Option<(String, f64)> {
        fn walk(v: &toml::Value, path: &str) -> Option<(String, f64)> {
            match v {
                toml::Value::Float(x) if !x.is_finite() => Some((path.to_string(), *x)),
                toml::Value::Table(t) => t.iter().find_map(|(k, v)| {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, &p)
                }),
                toml::Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .find_map(|(i, v)| walk(v, &format!("{path}[{i}]"))),
                _ => None,
            }
        }
        walk(&toml::Value::try_from(self).ok()?, "")
    }
}

/// The range a float key must lie in ([`Config::validate`]).
#[derive(Clone, Copy)]
enum Bound {
    /// `>= 0`: temperatures, learning rates, weight decays.
    AtLeastZero,
    /// `(0, 1]`: a share that cannot be empty (top-p, the filter ratio, the failure rate).
    ZeroToOneOpenBelow,
    /// `[0, 1]`: discounts and warm-up ratios.
    ZeroToOne,
}

impl Bound {
    fn holds(self, x: f64) -> bool {
        match self {
            Bound::AtLeastZero => x >= 0.0,
            Bound::ZeroToOneOpenBelow => x > 0.0 && x <= 1.0,
            Bound::ZeroToOne => (0.0..=1.0).contains(&x),
        }
    }

    fn text(self) -> &'static str {
        match self {
            Bound::AtLeastZero => ">= 0",
            Bound::ZeroToOneOpenBelow => "in (0, 1]",
            Bound::ZeroToOne => "in [0, 1]",
        }
    }
}
