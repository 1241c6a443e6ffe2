//! The binary reads the machine's CPU description once per process, not once per kernel call
//! (`ragen_gym_policy::cpu::pin_num_threads`). Before the pin, candle's CPU matmul opened and
//! parsed `/proc/cpuinfo` on every call: 1,688 opens to generate 16 tokens with the default model
//! on the AMD EPYC of `docs/benchmarks.md`, 3.7 % of a validation's CPU time.

use crate::child::cli;
use std::process::Command;

/// Generates 32 tokens on the tiny model under `strace` and counts the opens of `/proc/cpuinfo`
/// and of the `/sys` CPU files across every thread of the process: each forward runs dozens of
/// matmuls, so anything read per call shows up hundreds of times.
#[test]
fn generating_reads_the_cpu_description_at_most_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    let trace = dir.path().join("openat.txt");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .arg(cli())
        .arg("generate")
        .arg("--model")
        .arg(&model)
        .args(["--prompt", "What is 2+3?", "--max-new-tokens", "32"])
        .env_remove("RAYON_NUM_THREADS")
        .output()
        .expect("strace is missing: scripts/setup.sh installs it (apt)");
    assert!(
        out.status.success(),
        "generate under strace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let opens = std::fs::read_to_string(&trace).unwrap();
    let count = |needle: &str| opens.lines().filter(|l| l.contains(needle)).count();
    // At least one open proves the trace saw the process's file opens.
    assert!(count("openat(") > 0, "strace recorded no openat: {opens}");
    assert!(
        count("/proc/cpuinfo") <= 1,
        "/proc/cpuinfo opened {} times",
        count("/proc/cpuinfo")
    );
    // candle's CPU detection lists this directory once per detection.
    assert!(
        count("\"/sys/devices/system/cpu\"") <= 2,
        "/sys/devices/system/cpu listed {} times",
        count("\"/sys/devices/system/cpu\"")
    );
}
