//! The one trait a plugin author implements.

use crate::types::{EnvError, EnvSpec, ResetResult, StepResult};

/// A Gymnasium-style text environment.
///
/// `config` strings are JSON objects (`""` means the defaults). Every source of randomness must
/// be derived from the `reset` seed: the same seed and actions give the same episode.
pub trait Environment: Sized + 'static {
    /// Describe the env for a config (prompt instruction, action names, budgets, defaults).
    fn spec(config: &str) -> Result<EnvSpec, EnvError>;
    /// Build an env from a config.
    fn new(config: &str) -> Result<Self, EnvError>;
    /// Start an episode from `seed`.
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError>;
    /// Apply one action. Unknown actions are not errors: return `action_is_valid = false`.
    fn step(&mut self, action: &str) -> Result<StepResult, EnvError>;
}
