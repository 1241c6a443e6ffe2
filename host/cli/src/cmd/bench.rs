//! `ragen-gym bench ...`: benchmarks that measure side by side in one run and print ratios.

use std::process::ExitCode;

/// Benchmark families.
#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Env steps/s through the sandbox vs natively, fresh-instance cost, fuel on/off.
    Envs(EnvsArgs),
    /// Sampling and training tokens/s, peak memory, full and LoRA.
    Policy(PolicyArgs),
}

#[path = "bench_envs.rs"]
mod envs;
pub use envs::EnvsArgs;

/// Arguments of `bench policy`.
#[derive(clap::Args)]
pub struct PolicyArgs {}

/// Run a benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Envs(a) => envs::run(a),
        BenchCommand::Policy(_) => anyhow::bail!("`bench policy` is not built yet"),
    }
}
