//! Why building a plugin project failed: each variant names the file, field, tool or command.

use std::path::PathBuf;

/// A failure of [`crate::project`] loading or of a plugin build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
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
        move |source| Self::Io { path, source }
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
