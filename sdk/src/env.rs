//! The trait an environment plugin implements.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::manifest::{Capabilities, Limits, ManifestParts, Package};
use crate::types::{Advice, EnvError, EnvSpec, ExpertInfo, ResetResult, StepResult};

/// A Gymnasium-style text environment.
///
/// Only [`ID`](Self::ID), [`Config`](Self::Config), [`spec`](Self::spec), [`new`](Self::new),
/// [`reset`](Self::reset) and [`step`](Self::step) are required. An env with an expert (what a
/// good action is from the current state: demonstrations, `eval --policy expert`, `sft`) also
/// implements [`expert_info`](Self::expert_info) and [`expert`](Self::expert); the defaults say
/// it has none. The plugin's manifest is
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

    /// The env's expert for a config, or `None` (the default) when it has none for it.
    fn expert_info(config: &Self::Config) -> Option<ExpertInfo> {
        let _ = config;
        None
    }

    /// The expert's advice from the current state; must not change the env. Called only when
    /// [`expert_info`](Self::expert_info) is `Some` for the env's config.
    ///
    /// # Errors
    /// [`EnvError::NotReady`] before `reset` or after the episode ended; the default reports
    /// that the env has no expert.
    fn expert(&mut self) -> Result<Advice, EnvError> {
        Err(EnvError::Other(format!("{} has no expert", Self::ID)))
    }
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
