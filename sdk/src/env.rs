//! The trait an environment plugin implements.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::manifest::{Capabilities, Limits, ManifestParts, Package};
use crate::types::{EnvError, EnvSpec, ResetResult, StepResult};

/// A Gymnasium-style text environment.
///
/// Only [`ID`](Self::ID), [`Config`](Self::Config), [`spec`](Self::spec), [`new`](Self::new),
/// [`reset`](Self::reset) and [`step`](Self::step) are required. The plugin's manifest is
/// derived from `ID`, [`CAPABILITIES`](Self::CAPABILITIES), [`LIMITS`](Self::LIMITS) and the
/// crate's Cargo `version` and `description` by [`export_env!`](crate::export_env); the spec's
/// `id`, `version`, `description` and `default_config` are filled from the same sources, so the
/// two cannot disagree.
///
/// Every source of randomness must be derived from the `reset` seed: the same seed and actions
/// give the same episode.
pub trait Environment: Sized + 'static {
    /// Gymnasium-style id `namespace/Name-vN` (checked when the crate compiles).
    const ID: &'static str;
    /// What the plugin asks the user to grant (default: nothing).
    const CAPABILITIES: Capabilities = Capabilities::NONE;
    /// Limits lower than the host's (default: the host's).
    const LIMITS: Limits = Limits::NONE;

    /// The configuration, parsed from the JSON object the host passes (`""` or `{}` means
    /// `Default`). Use `()` for an env without options; add `#[serde(deny_unknown_fields)]` to
    /// reject misspelt keys.
    type Config: Serialize + DeserializeOwned + Default;

    /// Reject a config the type system cannot (ranges, cross-field rules); called before
    /// [`spec`](Self::spec) and [`new`](Self::new). The default accepts every parsed config.
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] naming the field and why.
    fn check_config(config: &Self::Config) -> Result<(), EnvError> {
        let _ = config;
        Ok(())
    }

    /// Describe the env for a config: instruction, action names, budgets
    /// ([`EnvSpec::new`] and its builder methods).
    fn spec(config: &Self::Config) -> EnvSpec;

    /// Build an env from a checked config.
    ///
    /// # Errors
    /// [`EnvError`] when the env cannot be built.
    fn new(config: Self::Config) -> Result<Self, EnvError>;

    /// Start an episode from `seed`. `Ok("observation".into())` when there is no info.
    ///
    /// # Errors
    /// [`EnvError`] for a failure the env reports (not for panics, which are traps).
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError>;

    /// Apply one action. Unknown actions are not errors: return [`StepResult::invalid`].
    ///
    /// # Errors
    /// [`EnvError::NotReady`] before `reset` or after the episode ended.
    fn step(&mut self, action: &str) -> Result<StepResult, EnvError>;
}

impl ManifestParts {
    /// The manifest of an environment plugin (what [`export_env!`](crate::export_env) embeds).
    pub const fn env<T: Environment + Package>() -> Self {
        Self {
            id: T::ID,
            version: T::VERSION,
            kind: "environment",
            description: T::DESCRIPTION,
            capabilities: T::CAPABILITIES,
            limits: T::LIMITS,
        }
    }
}
