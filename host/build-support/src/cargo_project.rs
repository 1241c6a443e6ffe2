//! Build a Rust plugin crate outside the workspace (what `ragen-gym new --lang rust` writes):
//! `cargo build --release --target wasm32-wasip2 --locked`, so the versions in the crate's
//! `Cargo.lock` are the ones built, and copy the component cargo reports to the output path.
//! The manifest is already inside: the SDK's `export_env!` / `export_reward!` embed it.

use crate::componentize::write_atomically;
use crate::error::BuildError;
use crate::project::Project;
use crate::tools::run;
use crate::{WASM_TARGET, check_target};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Build the crate of `project` (offline with `offline`, into `target_dir` when given, else
/// cargo's default) and write its component to `out`.
///
/// # Errors
/// [`BuildError::CommandFailed`] with cargo's diagnostics; [`BuildError::BadOutput`] when cargo
/// reports no `cdylib` for the crate; [`BuildError::TargetMissing`] when the Rust target is not
/// installed.
pub fn build_rust(
    project: &Project,
    offline: bool,
    target_dir: Option<&Path>,
    out: &Path,
) -> Result<PathBuf, BuildError> {
    check_target()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&project.dir)
        .args(["build", "--release", "--locked", "--target", WASM_TARGET])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&project.file)
        // A build started from inside another cargo command must not inherit its target.
        .env_remove("CARGO_BUILD_TARGET");
    if offline {
        cmd.arg("--offline");
    }
    if let Some(dir) = target_dir {
        cmd.arg("--target-dir").arg(dir);
    }
    let output = run(&mut cmd)?;
    let artifact = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["manifest_path"].as_str().map(Path::new) == Some(project.file.as_path()))
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect::<Vec<_>>()
        })
        .find(|f| f.extension().is_some_and(|e| e == "wasm"))
        .ok_or_else(|| BuildError::BadOutput {
            path: project.file.clone(),
            reason: "cargo built no .wasm for this crate: is `crate-type = [\"cdylib\"]` set under [lib]?".into(),
        })?;
    let bytes = std::fs::read(&artifact).map_err(BuildError::io(&artifact))?;
    write_atomically(out, &bytes)?;
    Ok(artifact)
}
