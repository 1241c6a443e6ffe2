//! `ragen-gym bench ...`: benchmarks that measure side by side in one run and print ratios.

/// Benchmark families.
#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Env steps/s through the sandbox vs natively, fresh-instance cost, fuel on/off.
    Envs(EnvsArgs),
    /// Sampling and training tokens/s, peak memory, full and LoRA.
    Policy(PolicyArgs),
    /// The one-run GPU check on a Qwen2.5-0.5B-shaped random model: correctness, throughput,
    /// a RAGEN-shaped iteration (run it through scripts/gpu-check.sh; docs/gpu.md).
    GpuCheck(GpuCheckArgs),
    /// One RAGEN-shaped training iteration (sampling, scoring, critic, actor) with prefix
    /// sharing on and off, alternating in one run (docs/benchmarks.md).
    Iteration(IterationArgs),
    /// `ragen-gym serve` under N concurrent clients next to in-process batch-N sampling of the
    /// same prompts, alternating in one run: tokens/s, latency percentiles, the ratio.
    Serve(ServeArgs),
    /// The sampler's stop-string check on a RAGEN turn's rows: decoding every row's tokens after
    /// each new one (the old rule) against the incremental scan, alternating in one run.
    StopScan(StopScanArgs),
}

mod envs;
pub use envs::EnvsArgs;

mod policy;
pub use policy::PolicyArgs;

mod gpu_check;
pub use gpu_check::GpuCheckArgs;

mod iteration;
pub use iteration::IterationArgs;

mod serve;
pub use serve::ServeArgs;

mod stop_scan;
pub use stop_scan::StopScanArgs;

pub mod harness;
pub mod memory;
mod stats;

/// Run a benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Envs(a) => envs::run(a),
        BenchCommand::Policy(a) => policy::run(a),
        BenchCommand::GpuCheck(a) => gpu_check::run(a),
        BenchCommand::Iteration(a) => iteration::run(a),
        BenchCommand::Serve(a) => serve::run(a),
        BenchCommand::StopScan(a) => stop_scan::run(a),
    }
}
