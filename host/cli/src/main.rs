//! The `ragen-gym` binary: parse the command line and run it (see the `ragen_gym_cli` library).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // SAFETY: the first line of `main`, before any thread starts.
    unsafe { ragen_gym_policy::cpu::pin_num_threads() };
    ragen_gym_cli::run(ragen_gym_cli::Cli::parse())
}
