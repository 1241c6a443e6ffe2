//! Expected failures and the exit codes they map to (after cargo-nextest's `NextestExitCode`:
//! every outcome a script may want to tell apart has its own documented code).

use std::process::ExitCode;

/// The exit codes of `ragen-gym`, one per kind of outcome.
pub mod exit_code {
    /// Success.
    pub const OK: u8 = 0;
    /// A failure of no more specific kind (I/O, model loading, env runtime, ...).
    pub const FAILURE: u8 = 1;
    /// The command line could not be parsed (clap's own code).
    pub const USAGE: u8 = 2;
    /// `ragen-gym check`: the plugin loaded and ran, and at least one conformance check failed.
    pub const CHECKS_FAILED: u8 = 10;
    /// A plugin was refused or failed to load: not a file or built-in, not a component, bad or
    /// missing manifest, unsupported interface version, undeclared imports, wrong plugin kind.
    pub const PLUGIN_REFUSED: u8 = 11;
    /// The training configuration is invalid: a file that does not parse, an unknown key, a
    /// wrong type or value, a bad `--set`.
    pub const CONFIG_ERROR: u8 = 12;
    /// Training (or model evaluation) started and then failed.
    pub const TRAINING_FAILED: u8 = 13;
    /// `ragen-gym replay`: a replayed trajectory differs from its record.
    pub const REPLAY_DIVERGED: u8 = 14;
}

/// The exit-code table as shown after `ragen-gym --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0   success
  1   failure of no more specific kind (I/O, model loading, env runtime)
  2   usage error (bad command line)
  10  check: at least one conformance check failed
  11  a plugin was refused or failed to load
  12  invalid training configuration
  13  training or model evaluation failed
  14  replay: a trajectory did not replay identically";

/// A failure whose kind decides the exit code. Commands wrap their errors in it where the kind
/// is known; `main` finds it anywhere in the error chain.
#[derive(Debug, thiserror::Error)]
pub enum ExpectedError {
    /// Conformance checks failed.
    #[error("{env_id}: {failed} of {total} checks failed")]
    ChecksFailed {
        /// The checked env.
        env_id: String,
        /// Failed checks.
        failed: usize,
        /// All checks run.
        total: usize,
    },
    /// A plugin was refused or failed to load.
    #[error("plugin {plugin} could not be loaded")]
    PluginRefused {
        /// The plugin as the user named it.
        plugin: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// The configuration is invalid.
    #[error("invalid configuration")]
    Config {
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// Replayed trajectories differ from their record.
    #[error("{diverged} trajectories did not replay identically")]
    ReplayDiverged {
        /// How many.
        diverged: usize,
    },
    /// Training or model evaluation failed after it started.
    #[error("{what} failed")]
    Training {
        /// `training`, `evaluation`.
        what: &'static str,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
}

impl ExpectedError {
    /// A plugin load failure.
    pub fn plugin(plugin: &str, source: impl Into<anyhow::Error>) -> Self {
        Self::PluginRefused {
            plugin: plugin.to_string(),
            source: source.into(),
        }
    }

    /// A configuration failure.
    pub fn config(source: impl Into<anyhow::Error>) -> Self {
        Self::Config {
            source: source.into(),
        }
    }

    /// A training failure.
    pub fn training(what: &'static str, source: impl Into<anyhow::Error>) -> Self {
        Self::Training {
            what,
            source: source.into(),
        }
    }

    /// The exit code of this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::ChecksFailed { .. } => exit_code::CHECKS_FAILED,
            Self::PluginRefused { .. } => exit_code::PLUGIN_REFUSED,
            Self::Config { .. } => exit_code::CONFIG_ERROR,
            Self::Training { .. } => exit_code::TRAINING_FAILED,
            Self::ReplayDiverged { .. } => exit_code::REPLAY_DIVERGED,
        }
    }
}

/// The exit code of a command's error: that of the first [`ExpectedError`] in its chain, else
/// [`exit_code::FAILURE`].
pub fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    let code = err
        .chain()
        .find_map(|e| e.downcast_ref::<ExpectedError>())
        .map_or(exit_code::FAILURE, ExpectedError::exit_code);
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_expected_error_decides_the_code_even_under_context() {
        let e: anyhow::Result<()> =
            Err(ExpectedError::config(anyhow::anyhow!("unknown key"))).context("while loading");
        let e = e.unwrap_err();
        assert_eq!(exit_code_of(&e), ExitCode::from(exit_code::CONFIG_ERROR));
        assert_eq!(
            format!("{e:#}"),
            "while loading: invalid configuration: unknown key"
        );
        let plain = anyhow::anyhow!("disk full");
        assert_eq!(exit_code_of(&plain), ExitCode::from(exit_code::FAILURE));
        let codes = [
            ExpectedError::ChecksFailed {
                env_id: "x".into(),
                failed: 1,
                total: 2,
            }
            .exit_code(),
            ExpectedError::plugin("p", anyhow::anyhow!("bad")).exit_code(),
            ExpectedError::config(anyhow::anyhow!("bad")).exit_code(),
            ExpectedError::training("training", anyhow::anyhow!("bad")).exit_code(),
            ExpectedError::ReplayDiverged { diverged: 1 }.exit_code(),
        ];
        assert_eq!(codes, [10, 11, 12, 13, 14]);
        // every code is in the help table
        for c in codes {
            assert!(EXIT_CODES_HELP.contains(&format!("  {c}  ")), "{c}");
        }
    }
}
