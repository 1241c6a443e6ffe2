//! Expected failures and the exit codes they map to (after cargo-nextest's `NextestExitCode`:
//! every outcome a script may want to tell apart has its own documented code).

use std::process::ExitCode;

/// Writes the exit-code table once: each row a documented constant in [`exit_code`] and an
/// entry of [`EXIT_CODES`] (the line `--help` shows).
macro_rules! exit_codes {
    ($($(#[doc = $doc:literal])* $name:ident = $code:literal, $help:literal;)*) => {
        /// The exit codes of `ragen-gym`, one per kind of outcome.
        pub mod exit_code {
            $($(#[doc = $doc])* pub const $name: u8 = $code;)*
        }

        /// Every exit code with its one-line meaning, in order.
        pub const EXIT_CODES: &[(u8, &str)] = &[$(($code, $help)),*];
    };
}

exit_codes! {
    /// Success.
    OK = 0, "success";
    /// A failure of no more specific kind (I/O, model loading, env runtime, ...).
    FAILURE = 1, "failure of no more specific kind (I/O, model loading, env runtime)";
    /// The command line could not be parsed (clap's own code).
    USAGE = 2, "usage error (bad command line)";
    /// `ragen-gym check`: the plugin loaded and ran, and at least one conformance check failed.
    CHECKS_FAILED = 10, "check: at least one conformance check failed";
    /// A plugin was refused or failed to load: not a file or built-in, not a component, bad or
    /// missing manifest, unsupported interface version, undeclared imports, wrong plugin kind.
    PLUGIN_REFUSED = 11, "a plugin was refused or failed to load";
    /// The training configuration is invalid: a file that does not parse, an unknown key, a
    /// wrong type or value, a bad `--set`.
    CONFIG_ERROR = 12, "invalid training configuration";
    /// Training (or model evaluation) started and then failed.
    TRAINING_FAILED = 13, "training or model evaluation failed";
    /// `ragen-gym replay`: a replayed trajectory differs from its record.
    REPLAY_DIVERGED = 14, "replay: a trajectory did not replay identically";
}

/// The exit-code table as shown after `ragen-gym --help`, from [`EXIT_CODES`].
pub fn exit_codes_help() -> String {
    let mut text = String::from("Exit codes:");
    for (code, help) in EXIT_CODES {
        text.push_str(&format!("\n  {code:<4}{help}"));
    }
    text
}

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
        let help = exit_codes_help();
        for c in codes {
            assert!(help.contains(&format!("\n  {c}  ")), "{c}");
        }
    }

    #[test]
    fn the_help_lists_every_code_once_in_order() {
        let help = exit_codes_help();
        assert_eq!(
            help.lines().take(3).collect::<Vec<_>>(),
            [
                "Exit codes:",
                "  0   success",
                "  1   failure of no more specific kind (I/O, model loading, env runtime)"
            ]
        );
        let codes: Vec<u8> = help
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(codes, [0, 1, 2, 10, 11, 12, 13, 14]);
        assert_eq!(exit_code::REPLAY_DIVERGED, 14);
    }
}
