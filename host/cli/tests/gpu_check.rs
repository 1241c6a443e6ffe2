//! The GPU check's CPU fallback (`docs/gpu.md`, "CPU fallback"): `scripts/gpu-check.sh OUT --device cpu --shape tiny` runs
//! every Rust part (correctness, sampling, train-step, both RAGEN-shaped iterations) with this
//! build's binary and writes a report whose figures are real measurements.
//!
//! It lives here rather than in tests/all because it needs the `ragen-gym` binary
//! (`CARGO_BIN_EXE_ragen-gym` exists only for this package's integration tests).

use std::path::Path;
use std::process::Command;

fn read(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn positive(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

/// `scripts/gpu-check.sh OUT --device cpu --shape tiny --budget-s BUDGET` with this build's
/// binary, `OUT` emptied first; callers add their own arguments.
fn cpu_check(out: &Path, budget_s: &str) -> Command {
    let _ = std::fs::remove_dir_all(out);
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
        .arg(out)
        .args(["--device", "cpu", "--shape", "tiny", "--budget-s", budget_s])
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_ragen-gym"));
    cmd
}

#[test]
fn gpu_check_cpu_fallback_runs_every_part_at_the_tiny_shape() {
    let out = std::env::temp_dir().join(format!("ragen-gym-gpu-check-test-{}", std::process::id()));
    let status = cpu_check(&out, "600")
        .status()
        .expect("bash runs scripts/gpu-check.sh");
    let log = std::fs::read_to_string(out.join("logs/gpu-check.log")).unwrap_or_default();
    assert!(status.success(), "gpu-check.sh failed:\n{log}");
    let report = read(&out.join("report.json"));
    let rust = &report["rust"];
    assert_eq!(report["workload"]["shape"], "tiny");
    assert_eq!(report["workload"]["config"]["num_hidden_layers"], 2);

    // (a) correctness: every check present and passing; bf16 really differs from f32.
    let checks = &rust["correctness"]["checks"];
    assert_eq!(report["correctness_pass"], true, "{checks}");
    for name in [
        "logits_f32_vs_cpu",
        "logprobs_bf16_vs_f32",
        "sampler_vs_scorer_bf16",
        "sampler_vs_scorer_f32",
    ] {
        assert_eq!(checks[name]["pass"], true, "{name}: {}", checks[name]);
    }
    positive(
        &checks["logprobs_bf16_vs_f32"]["max_abs_diff_nats"],
        "bf16 vs f32 difference",
    );
    positive(&checks["logits_f32_vs_cpu"]["positions"], "positions");

    // (b) throughput: sampling, a training step in both modes, both iterations with the
    // breakdown the issue asks for.
    let s = &rust["sampling"];
    assert_eq!(s["device"], "cpu");
    positive(&s["tokens_per_s"], "sampling tokens/s");
    assert!(s["generated_tokens"].as_u64().unwrap() > 0);
    let modes = rust["train-step"]["modes"]
        .as_array()
        .expect("train-step modes");
    assert_eq!(modes.len(), 2);
    assert_eq!(modes[0]["mode"], "full");
    assert_eq!(modes[1]["mode"], "lora");
    assert!(
        modes[1]["trainable_params"].as_u64() < modes[0]["trainable_params"].as_u64(),
        "LoRA trains fewer parameters"
    );
    for m in modes {
        positive(&m["tokens_per_s"], "train tokens/s");
        positive(&m["memory"]["host_peak_rss_mib"], "peak RSS");
    }
    for mode in ["full", "lora"] {
        let it = &rust[format!("iteration-{mode}").as_str()];
        assert_eq!(it["mode"], mode, "{it}");
        for k in ["sampling", "scoring", "critic", "actor", "iteration"] {
            positive(&it["timing_s"][k], &format!("{mode} timing {k}"));
        }
        // 2 groups x 2 rollouts, all kept (filter ratio 1).
        assert_eq!(it["rollouts"]["kept_trajectories"], 4.0, "{it}");
        positive(&it["rollouts"]["mean_response_tokens"], "response tokens");
    }

    // (c) the PyTorch anchor runs only where python3 has torch; the report says which.
    let torch = &report["pytorch"];
    assert!(
        torch["skipped"].is_string() || torch["sampling"]["tokens_per_s"].is_number(),
        "{torch}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `--parts` (a rerun of what an earlier check missed): only the parts named run, after the
/// workload; a name that is no part is refused with exit 2, naming it.
#[test]
fn gpu_check_parts_runs_only_the_parts_named() {
    let run = |out: &Path, parts: &str| {
        cpu_check(out, "120")
            .args(["--parts", parts])
            .output()
            .expect("bash runs scripts/gpu-check.sh")
    };
    let base = std::env::temp_dir().join(format!("ragen-gym-gpu-parts-{}", std::process::id()));
    let out = base.join("sampling");
    let o = run(&out, "sampling");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["report.json", "rust-sampling.json", "workload.json"]
    );
    positive(
        &read(&out.join("report.json"))["rust"]["sampling"]["tokens_per_s"],
        "sampling tokens/s",
    );

    let o = run(&base.join("bogus"), "sampling,bogus");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no part named 'bogus'"), "{err}");
    assert!(
        !base.join("bogus/rust-sampling.json").exists(),
        "nothing ran"
    );
    let _ = std::fs::remove_dir_all(&base);
}
