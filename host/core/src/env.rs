//! The host's view of one environment instance: [`Env`], its counters [`EnvStats`], its error
//! [`EnvCallError`], and [`NativeEnv`] for env logic linked into the host.

use crate::failure::{EpisodeFailure, PluginFailure, PluginFailureKind};
use ragen_gym_sdk::{
    Advice, EnvError, EnvSpec, Environment, ExpertInfo, Package, ResetResult, StepResult, adapter,
};

/// Why a call into an environment failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvCallError {
    /// The env reported a domain error (bad config, step before reset, ...). The env's error is
    /// the payload of this message, not a cause, so it is printed here and not chained.
    #[error("env {env_id} returned an error: {error}")]
    Env {
        /// Env id, `namespace/Name-vN`.
        env_id: String,
        /// The env's own error.
        error: EnvError,
    },
    /// The plugin trapped or broke a sandbox rule (fuel, memory, deadline, panic, bad output).
    /// The instance has been discarded; the next `reset` runs on a fresh one.
    #[error(transparent)]
    Plugin(#[from] PluginFailure),
    /// The expert was asked of an env that has none: a plugin built before the contract had
    /// experts (interface 0.1.0), or one whose `expert.info` is `none` for this config.
    #[error("plugin {plugin} has no expert: {reason}")]
    NoExpert {
        /// The plugin's id and version, `namespace/Name-vN 0.1.0`.
        plugin: String,
        /// Why, e.g. which interface version it was built against.
        reason: String,
    },
}

impl EpisodeFailure {
    /// The class of a failed env call: a passed deadline is a timeout, anything else a trap.
    pub fn of(error: &EnvCallError) -> Self {
        match error {
            EnvCallError::Plugin(PluginFailure {
                kind: PluginFailureKind::Deadline,
                ..
            }) => Self::Timeout,
            _ => Self::Trap,
        }
    }
}

/// Counters of one env instance, for `sandbox/*` metrics. Native envs report zeros.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvStats {
    /// Fuel consumed by all calls so far (0 with fuel off).
    pub fuel_used: u64,
    /// Instances created (1 + the number of recoveries).
    pub instances: u64,
    /// Plugin failures (traps, bad output).
    pub plugin_errors: u64,
    /// HTTP requests refused by the capability gate.
    pub http_denied: u64,
    /// Log lines dropped by the per-call cap.
    pub log_dropped: u64,
    /// Log lines cut to the line cap (their tails were never copied out of the guest).
    pub log_clipped: u64,
}

impl EnvStats {
    /// Add `other`'s counters to these (the counters of a set of instances).
    pub fn add(&mut self, other: &EnvStats) {
        self.fuel_used += other.fuel_used;
        self.instances += other.instances;
        self.plugin_errors += other.plugin_errors;
        self.http_denied += other.http_denied;
        self.log_dropped += other.log_dropped;
        self.log_clipped += other.log_clipped;
    }

    /// What the counters grew by since `earlier`, a reading of the same instances (counters
    /// only grow; a smaller one reads as 0).
    pub fn since(&self, earlier: &EnvStats) -> EnvStats {
        EnvStats {
            fuel_used: self.fuel_used.saturating_sub(earlier.fuel_used),
            instances: self.instances.saturating_sub(earlier.instances),
            plugin_errors: self.plugin_errors.saturating_sub(earlier.plugin_errors),
            http_denied: self.http_denied.saturating_sub(earlier.http_denied),
            log_dropped: self.log_dropped.saturating_sub(earlier.log_dropped),
            log_clipped: self.log_clipped.saturating_sub(earlier.log_clipped),
        }
    }
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
    /// Counters so far (fuel, instances, failures, denials). Zeros unless the env is sandboxed.
    fn stats(&self) -> EnvStats {
        EnvStats::default()
    }
    /// The env's expert for its config, `None` when it has none (the default).
    fn expert_info(&mut self) -> Result<Option<ExpertInfo>, EnvCallError> {
        Ok(None)
    }
    /// The expert's advice from the current state (after `reset`); does not change the env.
    ///
    /// # Errors
    /// [`EnvCallError::NoExpert`] naming the plugin when it has no expert (the default).
    fn advise(&mut self) -> Result<Advice, EnvCallError> {
        Err(EnvCallError::NoExpert {
            plugin: self.spec().id.clone(),
            reason: "this env implementation has no expert".into(),
        })
    }
}

/// Env logic linked into the host, driven through the same [`Env`] trait as sandboxed plugins.
pub struct NativeEnv<E: Environment + Package> {
    spec: EnvSpec,
    expert: Option<ExpertInfo>,
    inner: E,
}

impl<E: Environment + Package> NativeEnv<E> {
    /// Build the env from its JSON config (`""` for defaults).
    ///
    /// # Errors
    /// [`EnvCallError::Env`] when the env rejects the config.
    pub fn new(config: &str) -> Result<Self, EnvCallError> {
        let spec = adapter::spec::<E>(config).map_err(|error| EnvCallError::Env {
            env_id: E::ID.into(),
            error,
        })?;
        let env_error = |error| EnvCallError::Env {
            env_id: spec.id.clone(),
            error,
        };
        let expert = adapter::expert_info::<E>(config).map_err(env_error)?;
        let inner = adapter::create::<E>(config).map_err(env_error)?;
        Ok(Self {
            spec,
            expert,
            inner,
        })
    }

    fn env_error(&self, error: EnvError) -> EnvCallError {
        EnvCallError::Env {
            env_id: self.spec.id.clone(),
            error,
        }
    }
}

impl<E: Environment + Package + Send> Env for NativeEnv<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvCallError> {
        self.inner.reset(seed).map_err(|e| self.env_error(e))
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvCallError> {
        self.inner.step(action).map_err(|e| self.env_error(e))
    }

    fn expert_info(&mut self) -> Result<Option<ExpertInfo>, EnvCallError> {
        Ok(self.expert.clone())
    }

    fn advise(&mut self) -> Result<Advice, EnvCallError> {
        if self.expert.is_none() {
            return Err(EnvCallError::NoExpert {
                plugin: format!("{} {}", self.spec.id, self.spec.version),
                reason: "its expert info is none for this config".into(),
            });
        }
        self.inner.expert().map_err(|e| self.env_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_passed_deadline_is_a_timeout_and_every_other_failure_a_trap() {
        let plugin = |kind| {
            EnvCallError::from(PluginFailure {
                kind,
                plugin_id: "t/T-v0".into(),
                version: "0.1.0".into(),
                message: String::new(),
            })
        };
        for kind in PluginFailureKind::ALL {
            let want = if kind == PluginFailureKind::Deadline {
                EpisodeFailure::Timeout
            } else {
                EpisodeFailure::Trap
            };
            assert_eq!(EpisodeFailure::of(&plugin(kind)), want, "{kind:?}");
        }
        let env = EnvCallError::Env {
            env_id: "t/T-v0".into(),
            error: EnvError::Other("x".into()),
        };
        assert_eq!(EpisodeFailure::of(&env), EpisodeFailure::Trap);
    }

    #[test]
    fn messages_do_not_repeat_their_source() {
        let env = EnvCallError::Env {
            env_id: "t/T-v0".into(),
            error: EnvError::NotReady("call reset".into()),
        };
        assert_eq!(
            env.to_string(),
            "env t/T-v0 returned an error: env not ready: call reset"
        );
        assert!(env.source().is_none());
        let plugin = EnvCallError::from(PluginFailure {
            kind: PluginFailureKind::Panic,
            plugin_id: "t/T-v0".into(),
            version: "0.1.0".into(),
            message: "boom".into(),
        });
        // Transparent: the failure's own message, once, and no separate source to print again.
        assert_eq!(
            plugin.to_string(),
            "from plugin \"t/T-v0\" 0.1.0: panicked: boom"
        );
        assert!(plugin.source().is_none());
    }

    #[test]
    fn stats_add_up_and_difference_over_a_span() {
        let before = EnvStats {
            fuel_used: 100,
            instances: 2,
            plugin_errors: 1,
            http_denied: 0,
            log_dropped: 5,
            log_clipped: 2,
        };
        let mut after = before.clone();
        after.add(&EnvStats {
            fuel_used: 20,
            instances: 1,
            plugin_errors: 1,
            http_denied: 3,
            log_dropped: 0,
            log_clipped: 4,
        });
        assert_eq!(
            after.since(&before),
            EnvStats {
                fuel_used: 20,
                instances: 1,
                plugin_errors: 1,
                http_denied: 3,
                log_dropped: 0,
                log_clipped: 4,
            }
        );
        assert_eq!(before.since(&after), EnvStats::default());
    }
}
