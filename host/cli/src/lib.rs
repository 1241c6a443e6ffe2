//! `ragen-gym`: train LLM agents with StarPO in sandboxed WebAssembly environments.
//!
//! The command-line tool as a library: the command line and its dispatch ([`app`]), one module
//! per subcommand ([`cmd`]), what the subcommands share ([`shared`]: device, plugins, sandbox,
//! config layers, the sandbox and envs of a run), the reporters that turn training events into
//! files and progress ([`report`]), and the typed failures that decide the exit code
//! ([`error`]). `main` only parses and calls [`run`].
#![deny(missing_docs)]

pub mod app;
pub mod cmd;
pub mod error;
pub mod report;
pub mod shared;

pub use app::{Cli, Command, run};
pub use error::{ExpectedError, exit_code};
