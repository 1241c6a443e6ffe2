//! Typed errors of the policy crate.

use std::path::PathBuf;

/// Everything that can go wrong while loading, running or training a policy.
///
/// Messages are lowercase fragments that read after "failed to ...".
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A tensor operation failed inside candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Reading or writing a file failed.
    #[error("i/o on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The default model file is not installed.
    #[error(
        "the default model is missing at {path}; run scripts/setup.sh (or pass --model / set RAGEN_GYM_CACHE)"
    )]
    ModelMissing {
        /// Where the model was looked for.
        path: PathBuf,
    },
    /// A model file or directory is malformed (bad config, missing tensor, wrong shape, ...).
    #[error("load model from {path}: {reason}")]
    InvalidModel {
        /// The offending file or directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A weight tensor the architecture needs is absent.
    #[error("find weight tensor {name:?}")]
    MissingTensor {
        /// Hugging Face name of the tensor.
        name: String,
    },
    /// A weight tensor has the wrong shape for the config.
    #[error("use weight tensor {name:?}: expected shape {expected:?}, found {found:?}")]
    ShapeMismatch {
        /// Hugging Face name of the tensor.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// The tokenizer could not be built or used.
    #[error("tokenizer: {reason}")]
    Tokenizer {
        /// What went wrong.
        reason: String,
    },
    /// Constrained decoding ([`crate::constrain`]): no token sequence of the vocabulary spells an
    /// action name.
    #[error("spell action {name:?}: no token sequence of the vocabulary spells it")]
    UnspellableAction {
        /// The env's action name.
        name: String,
    },
    /// A caller passed inconsistent arguments (shapes, lengths, parameters).
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument {
        /// The argument or field.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The requested device cannot be used (no `cuda` feature, no driver, no such GPU).
    #[error("open device {requested}: {reason}")]
    Device {
        /// The device as requested (`cuda:0`).
        requested: String,
        /// Why it cannot be opened.
        reason: String,
    },
    /// A checkpoint is incomplete or inconsistent.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Result alias of this crate.
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

impl PolicyError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid_model(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::InvalidModel {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn tokenizer(reason: impl std::fmt::Display) -> Self {
        Self::Tokenizer {
            reason: reason.to_string(),
        }
    }

    pub(crate) fn arg(name: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            name,
            reason: reason.into(),
        }
    }
}
