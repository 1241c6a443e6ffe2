//! The host's view of one environment instance.

use ragen_gym_sdk::{EnvError, EnvSpec, Environment, ResetResult, StepResult};

/// Why a call into an environment failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvCallError {
    /// The env reported a domain error (bad config, step before reset, ...).
    #[error("env {env_id} returned an error: {source}")]
    Env {
        /// Env id, `namespace/Name-vN`.
        env_id: String,
        /// The env's own error.
        #[source]
        source: EnvError,
    },
    /// The plugin trapped or broke a sandbox rule (fuel, memory, deadline, panic, bad output).
    /// The instance has been discarded; the next `reset` runs on a fresh one.
    #[error("{0}")]
    Plugin(String),
}

/// One running environment, Gymnasium-style. Implementations own their instance: envs never
/// share state, so a failure in one cannot affect another.
pub trait Env: Send {
    /// The env's spec for the config it was built with.
    fn spec(&self) -> &EnvSpec;
    /// Start an episode from `seed` (same seed, same initial state and outcomes).
    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError>;
    /// Apply one action.
    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError>;
}

/// Env logic linked into the host, driven through the same [`Env`] trait as sandboxed plugins.
pub struct NativeEnv<E: Environment> {
    spec: EnvSpec,
    inner: E,
}

impl<E: Environment> NativeEnv<E> {
    /// Build the env from its JSON config (`""` for defaults).
    pub fn new(config: &str) -> Result<Self, EnvCallError> {
        let spec = E::spec(config).map_err(|source| EnvCallError::Env {
            env_id: "native".into(),
            source,
        })?;
        let inner = E::new(config).map_err(|source| EnvCallError::Env {
            env_id: spec.id.clone(),
            source,
        })?;
        Ok(Self { spec, inner })
    }
}

impl<E: Environment + Send> Env for NativeEnv<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.inner.reset(seed).map_err(|source| EnvCallError::Env {
            env_id: self.spec.id.clone(),
            source,
        })
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        self.inner.step(action).map_err(|source| EnvCallError::Env {
            env_id: self.spec.id.clone(),
            source,
        })
    }
}
