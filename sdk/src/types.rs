//! Plain-Rust mirrors of the WIT records in `wit/types.wit`.
//!
//! These are the types both plugin authors and the host work with; the generated component
//! bindings are converted to and from them at the boundary.

use serde::{Deserialize, Serialize};

/// A named numeric value (WIT `metric`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// `snake_case` name.
    pub name: String,
    /// Value; the host rejects non-finite values.
    pub value: f64,
}

impl Metric {
    /// Shorthand constructor.
    pub fn new(name: impl Into<String>, value: f64) -> Self {
        Self {
            name: name.into(),
            value,
        }
    }
}

/// One symbol-legend entry (WIT `symbol`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Symbol {
    /// The symbol as printed in observations.
    pub symbol: String,
    /// Its meaning.
    pub meaning: String,
}

/// Description of an environment (WIT `env-spec`); field names follow Gymnasium's `EnvSpec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// `namespace/Name-vN`.
    pub id: String,
    /// Plugin semver.
    pub version: String,
    /// One sentence for people.
    pub description: String,
    /// Instruction text for the model's prompt.
    pub instruction: String,
    /// Discrete action names, matched case-insensitively by the host; `None` for text actions.
    pub action_names: Option<Vec<String>>,
    /// Symbol legend for observations.
    pub symbol_legend: Option<Vec<Symbol>>,
    /// Most actions per episode (RAGEN `max_actions_per_traj`).
    pub max_episode_steps: u32,
    /// Return at which an episode counts as solved, if any.
    pub reward_threshold: Option<f64>,
    /// Default config as a JSON object string.
    pub default_config: String,
}

/// Result of `reset` (Gymnasium `(observation, info)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResetResult {
    /// First observation.
    pub observation: String,
    /// Diagnostics.
    pub info: Vec<Metric>,
}

/// Result of `step` (Gymnasium five-tuple plus RAGEN's typed info keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// Next observation.
    pub observation: String,
    /// Reward for this action.
    pub reward: f64,
    /// Reached a terminal MDP state.
    pub terminated: bool,
    /// Cut short by a limit inside the env.
    pub truncated: bool,
    /// RAGEN `action_is_valid`.
    pub action_is_valid: bool,
    /// RAGEN `action_is_effective`: the state changed.
    pub action_is_effective: bool,
    /// RAGEN `success`.
    pub success: bool,
    /// Other diagnostics.
    pub info: Vec<Metric>,
}

/// A domain failure reported by an env (WIT `env-error`). Panics are traps, not these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EnvError {
    /// The config could not be used (names the field and why).
    InvalidConfig(String),
    /// `step` before `reset`, or after the episode ended.
    NotReady(String),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvError::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            EnvError::NotReady(m) => write!(f, "env not ready: {m}"),
            EnvError::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for EnvError {}

/// One turn of a finished trajectory, as given to reward-function plugins (WIT `turn`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Observation the model saw before answering.
    pub observation: String,
    /// The cleaned model response stored in the history.
    pub response: String,
    /// Text inside `<think>...</think>`, if the response parsed.
    pub think: Option<String>,
    /// Text inside `<answer>...</answer>`, if the response parsed.
    pub answer: Option<String>,
    /// Actions executed this turn, in order.
    pub actions: Vec<String>,
    /// Sum of the env rewards of this turn's actions.
    pub env_reward: f64,
    /// Turn diagnostics.
    pub info: Vec<Metric>,
}

/// A finished trajectory, as given to reward-function plugins (WIT `trajectory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Environment id, `namespace/Name-vN`.
    pub env_id: String,
    /// The seed the environment was reset with.
    pub seed: u64,
    /// The turns, in order.
    pub turns: Vec<Turn>,
    /// Whether the env reported success at the end.
    pub success: bool,
}

/// A reward-function plugin's verdict (WIT `reward-breakdown`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardBreakdown {
    /// Reward added to the trajectory's env rewards.
    pub total: f64,
    /// Named parts of `total`.
    pub components: Vec<Metric>,
}

/// What a plugin's expert is (WIT `expert-info`, since interface 0.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpertInfo {
    /// One sentence for people: how the expert chooses.
    pub description: String,
    /// Its actions maximise the probability of `success` within the episode's step budget.
    pub optimal: bool,
}

/// The expert's advice from one state (WIT `advice`, since interface 0.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// The actions the expert would take now, equally good, the preferred one first (empty: no
    /// move to recommend).
    pub actions: Vec<String>,
    /// The probability that following the expert from here reaches `success` within the steps
    /// left, when the expert knows it exactly.
    pub success_probability: Option<f64>,
}

impl Advice {
    /// Advice of one action, with the probability of success when known.
    pub fn one(action: impl Into<String>, success_probability: Option<f64>) -> Self {
        Self {
            actions: vec![action.into()],
            success_probability,
        }
    }
}
