//! Constrained action decoding for a run (`rollout.constrained_actions`, `docs/ragen-semantics.md`
//! §5, "Constrained action decoding"): the policy crate's [`ragen_gym_policy::Constraint`] built
//! once from the config, the env's action names and the tokenizer. Off in `configs/default.toml`,
//! so RAGEN's own configs sample freely.
//!
//! With it on, once a response reaches its answer the sampler may emit only
//! `Name ( sep Name )* </answer>` with the env's action names (at least
//! `rollout.constrained_min_actions`, at most `agent_proxy.max_actions_per_turn`), then the
//! end-of-turn token: right after the forced `<answer>` without thinking; after the model's
//! `</think>`, or after `rollout.max_think_tokens` free tokens (the host then appends
//! `</think><answer>`), with thinking. Names match case-insensitively, as the host maps them
//! (`prompt::map_actions`). See `ragen_gym_policy::constrain` for the sources (vLLM's guided
//! decoding; TWOSOME, arXiv 2401.14151).

use crate::config::{Config, ConfigError};
use ragen_gym_core::EnvSpec;
use ragen_gym_policy as pol;
use std::sync::Arc;

/// Why the constraint of a run could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    /// The option is on for an env without action names.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tokenizer cannot spell an action name or the answer tags.
    #[error("build the action constraint of env {env}")]
    Index {
        /// The env id.
        env: String,
        /// The policy's error (names the action).
        #[source]
        source: pol::PolicyError,
    },
}

/// The run's constraint, or `None` when `rollout.constrained_actions` is off.
///
/// # Errors
/// [`ConstraintError::Config`] naming the env and the key when the env lists no action names;
/// [`ConstraintError::Index`] when the tokenizer cannot spell an action name (the source names
/// it).
pub fn action_constraint(
    cfg: &Config,
    spec: &EnvSpec,
    tokenizer: &pol::Tokenizer,
) -> Result<Option<pol::Constraint>, ConstraintError> {
    if !cfg.rollout.constrained_actions {
        return Ok(None);
    }
    let names = spec
        .action_names
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ConfigError::Invalid {
            message: format!(
                "rollout.constrained_actions = true needs an env with action names, and env {} \
                 lists none (its actions are free text)",
                spec.id
            ),
        })?;
    let grammar = pol::ActionGrammar {
        names,
        separator: cfg.agent_proxy.action_sep.clone(),
        max_actions: cfg.agent_proxy.max_actions_per_turn,
        min_actions: cfg.rollout.constrained_min_actions,
        case_insensitive: true,
    };
    let index =
        pol::ActionIndex::new(&grammar, tokenizer).map_err(|source| ConstraintError::Index {
            env: spec.id.clone(),
            source,
        })?;
    let thinking = if cfg.agent_proxy.enable_think {
        pol::Thinking::On {
            max_think_tokens: (cfg.rollout.max_think_tokens > 0)
                .then_some(cfg.rollout.max_think_tokens),
        }
    } else {
        pol::Thinking::Off
    };
    Ok(Some(pol::Constraint {
        index: Arc::new(index),
        thinking,
    }))
}
