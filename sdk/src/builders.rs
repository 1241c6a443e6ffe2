//! Constructors with defaults for the records a plugin returns, so an env spells out only what
//! differs: [`EnvSpec::new`], [`ResetResult`] from a string, [`StepResult::new`] /
//! [`StepResult::invalid`], [`RewardBreakdown::from_components`].

use crate::types::{EnvSpec, Metric, ResetResult, RewardBreakdown, StepResult, Symbol};

/// `max_episode_steps` of [`EnvSpec::new`] unless [`EnvSpec::max_steps`] sets it.
pub const DEFAULT_MAX_EPISODE_STEPS: u32 = 10;

impl EnvSpec {
    /// A spec with this prompt instruction, free-text actions, no legend,
    /// [`DEFAULT_MAX_EPISODE_STEPS`] and no reward threshold. `id`, `version`, `description`
    /// and `default_config` are left empty: the SDK fills them from the manifest and the
    /// config type.
    pub fn new(instruction: impl Into<String>) -> Self {
        Self {
            id: String::new(),
            version: String::new(),
            description: String::new(),
            instruction: instruction.into(),
            action_names: None,
            symbol_legend: None,
            max_episode_steps: DEFAULT_MAX_EPISODE_STEPS,
            reward_threshold: None,
            default_config: String::new(),
        }
    }

    /// Discrete action names (matched case-insensitively by the host).
    #[must_use]
    pub fn actions<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.action_names = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// The symbol legend, as `(symbol, meaning)` pairs.
    #[must_use]
    pub fn legend<S: Into<String>, M: Into<String>>(
        mut self,
        entries: impl IntoIterator<Item = (S, M)>,
    ) -> Self {
        self.symbol_legend = Some(
            entries
                .into_iter()
                .map(|(symbol, meaning)| Symbol {
                    symbol: symbol.into(),
                    meaning: meaning.into(),
                })
                .collect(),
        );
        self
    }

    /// Most actions per episode (RAGEN `max_actions_per_traj`).
    #[must_use]
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_episode_steps = steps;
        self
    }

    /// The return at or above which an episode counts as solved.
    #[must_use]
    pub fn reward_threshold(mut self, threshold: f64) -> Self {
        self.reward_threshold = Some(threshold);
        self
    }

    /// A description for this config (default: the crate's Cargo `description`).
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

impl ResetResult {
    /// A first observation without info.
    pub fn new(observation: impl Into<String>) -> Self {
        Self {
            observation: observation.into(),
            info: Vec::new(),
        }
    }

    /// Add one info metric.
    #[must_use]
    pub fn metric(mut self, name: impl Into<String>, value: f64) -> Self {
        self.info.push(Metric::new(name, value));
        self
    }
}

impl From<String> for ResetResult {
    fn from(observation: String) -> Self {
        Self::new(observation)
    }
}

impl From<&str> for ResetResult {
    fn from(observation: &str) -> Self {
        Self::new(observation)
    }
}

impl StepResult {
    /// A valid, effective action with reward 0 that did not end the episode.
    pub fn new(observation: impl Into<String>) -> Self {
        Self {
            observation: observation.into(),
            reward: 0.0,
            terminated: false,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: false,
            info: Vec::new(),
        }
    }

    /// An action the env did not understand (RAGEN `action_is_valid = false`): no reward, no
    /// state change.
    pub fn invalid(observation: impl Into<String>) -> Self {
        Self {
            action_is_valid: false,
            action_is_effective: false,
            ..Self::new(observation)
        }
    }

    /// The reward of this action.
    #[must_use]
    pub fn reward(mut self, reward: f64) -> Self {
        self.reward = reward;
        self
    }

    /// Whether a terminal state of the MDP was reached.
    #[must_use]
    pub fn terminated(mut self, terminated: bool) -> Self {
        self.terminated = terminated;
        self
    }

    /// Whether a limit inside the env cut the episode short.
    #[must_use]
    pub fn truncated(mut self, truncated: bool) -> Self {
        self.truncated = truncated;
        self
    }

    /// Whether the task is solved (RAGEN `success`).
    #[must_use]
    pub fn success(mut self, success: bool) -> Self {
        self.success = success;
        self
    }

    /// Whether the action changed the state (RAGEN `action_is_effective`; default true).
    #[must_use]
    pub fn effective(mut self, effective: bool) -> Self {
        self.action_is_effective = effective;
        self
    }

    /// Add one info metric.
    #[must_use]
    pub fn metric(mut self, name: impl Into<String>, value: f64) -> Self {
        self.info.push(Metric::new(name, value));
        self
    }
}

impl RewardBreakdown {
    /// Named parts and their sum as the total.
    pub fn from_components<S: Into<String>>(parts: impl IntoIterator<Item = (S, f64)>) -> Self {
        let components: Vec<Metric> = parts
            .into_iter()
            .map(|(name, value)| Metric::new(name, value))
            .collect();
        Self {
            total: components.iter().map(|m| m.value).sum(),
            components,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let spec = EnvSpec::new("Go.").actions(["A", "B"]).max_steps(3);
        assert_eq!(spec.action_names, Some(vec!["A".into(), "B".into()]));
        assert_eq!((spec.max_episode_steps, spec.reward_threshold), (3, None));
        assert_eq!(
            EnvSpec::new("x").max_episode_steps,
            DEFAULT_MAX_EPISODE_STEPS
        );
        let step = StepResult::new("o")
            .reward(1.0)
            .terminated(true)
            .success(true);
        assert!(step.action_is_valid && step.action_is_effective && !step.truncated);
        let bad = StepResult::invalid("?");
        assert!(!bad.action_is_valid && !bad.action_is_effective && bad.reward == 0.0);
        assert_eq!(ResetResult::from("hi").metric("n", 2.0).info[0].value, 2.0);
        let r = RewardBreakdown::from_components([("a", 0.5), ("b", -0.25)]);
        assert_eq!(r.total, 0.25);
        assert_eq!(r.components[1].name, "b");
    }
}
