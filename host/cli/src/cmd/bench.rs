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

#[path = "bench_policy.rs"]
mod policy;
pub use policy::PolicyArgs;

/// Run a benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Envs(a) => envs::run(a),
        BenchCommand::Policy(a) => policy::run(a),
    }
}
