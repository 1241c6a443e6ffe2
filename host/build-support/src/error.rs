//! Why building a plugin project failed: each variant names the file, field, tool or command.

use std::path::PathBuf;

/// A failure of [`crate::project`] loading or of a plugin build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error: in the message and not a `source`, so build scripts, which print the
        /// message alone, show it and an error-chain printer does not repeat it.
        error: std::io::Error,
    },
    /// The directory holds no plugin project.
    #[error(
        "{}: not a plugin project (no Cargo.toml, no pyproject.toml with [tool.ragen-gym], no package.json with a \"ragen-gym\" field)",
        dir.display()
    )]
    NotAProject {
        /// The directory.
        dir: PathBuf,
    },
    /// A project file is malformed or a field is missing or wrong.
    #[error("{}: {field}: {reason}", path.display())]
    Field {
        /// The project file.
        path: PathBuf,
        /// The field, e.g. `tool.ragen-gym.entry`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A build tool is not installed and may not be installed now.
    #[error("{tool} {version} is not installed (looked in {looked}); install it with `{install}`")]
    ToolMissing {
        /// The tool, e.g. `componentize-py`.
        tool: String,
        /// The pinned version.
        version: String,
        /// Where it was looked for.
        looked: String,
        /// The command that installs it.
        install: String,
    },
    /// The Rust target the plugins build for is not installed.
    #[error(
        "the Rust target {target} is not installed (needed to build the plugins); run scripts/setup.sh (or `rustup target add {target}`)"
    )]
    TargetMissing {
        /// The target triple ([`crate::WASM_TARGET`]).
        target: &'static str,
    },
    /// A command failed.
    #[error("`{command}` failed ({status}){}", tail_text(tail))]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The last lines of its stderr.
        tail: String,
    },
    /// The tool ran but its output is unusable.
    #[error("{}: {reason}", path.display())]
    BadOutput {
        /// The output file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn tail_text(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(":\n{tail}")
    }
}

impl BuildError {
    /// An [`BuildError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |error| Self::Io { path, error }
    }

    /// A [`BuildError::Field`].
    pub fn field(path: impl Into<PathBuf>, field: &str, reason: impl Into<String>) -> Self {
        Self::Field {
            path: path.into(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BuildError;

    /// Build scripts print an error's message alone and the CLI prints the chain: the OS error
    /// is in the message and not repeated as a cause.
    #[test]
    fn an_io_error_names_the_os_error_once_in_message_or_chain() {
        let e = BuildError::io("plugins/x/Cargo.toml")(std::io::Error::from_raw_os_error(2));
        assert_eq!(
            e.to_string(),
            "plugins/x/Cargo.toml: No such file or directory (os error 2)"
        );
        assert!(std::error::Error::source(&e).is_none());
    }
}
