//! Why training failed.

use crate::action_constraint::ConstraintError;
use crate::config::ConfigError;
use crate::events::ReportError;
use crate::failure_policy::FailureError;
use crate::prompt::TokenizeError;
use crate::rollout::RolloutError;
use crate::run_dir::RunDirError;
use ragen_gym_core::EnvCallError;

/// Why training failed. Messages are lowercase fragments; sources are not repeated in them
/// (an error chain printer shows each once).
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The policy side failed (model loading, tensors, checkpoints).
    #[error(transparent)]
    Policy(#[from] ragen_gym_policy::PolicyError),
    /// The run directory could not be read or written.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Constrained action decoding could not be set up for the env.
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
    /// An env instance could not be created.
    #[error("create an env instance")]
    Env(#[from] EnvCallError),
    /// A rollout failed as a whole (env failures only end their trajectory).
    #[error("roll out")]
    Rollout(#[from] RolloutError),
    /// The failure policy stopped the run (`[failure]`: `fail_fast`, or too many failed
    /// trajectories).
    #[error(transparent)]
    Failure(#[from] FailureError),
    /// A trajectory could not be tokenised for training.
    #[error("build the training batch")]
    Batch(#[from] TokenizeError),
    /// A reporter (a sink of the trainer's events) failed.
    #[error("report training events")]
    Report(#[from] ReportError),
    /// Expert demonstrations could not be collected or do not fit the answer format (`sft`).
    #[error("expert demonstrations")]
    Demonstrations(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The run directory cannot be continued this way (the message names it and says why).
    #[error("{0}")]
    Resume(String),
}
