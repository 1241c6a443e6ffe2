//! Compile the hostile and test plugin fixtures (`tests/fixtures/*`) to wasm32-wasip2
//! components with a nested cargo build, the same way `host/builtins/build.rs` builds the
//! built-ins, and pass their paths to the tests as `FIXTURE_<NAME>` env vars.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (env var suffix, cargo package, artifact stem)
const FIXTURES: &[(&str, &str, &str)] = &[
    ("HOSTILE", "ragen-hostile", "ragen_hostile"),
    (
        "NOEXPORT",
        "ragen-hostile-noexport",
        "ragen_hostile_noexport",
    ),
    ("REWARD_LEN", "ragen-reward-len", "ragen_reward_len"),
];

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest_dir
        .join("..")
        .canonicalize()
        .expect("workspace root");
    for dir in ["tests/fixtures", "sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let target_dir = root.join("target/wasm-plugins");
    check_target();
    let packages: Vec<&str> = FIXTURES.iter().map(|f| f.1).collect();
    if let Err(e) = cargo_build(&root, &target_dir, &packages) {
        panic!("building the test fixtures failed: {e}");
    }
    for (var, _, stem) in FIXTURES {
        let artifact = target_dir.join(format!("wasm32-wasip2/wasm-plugin/{stem}.wasm"));
        println!("cargo:rustc-env=FIXTURE_{var}={}", artifact.display());
    }
}

/// Panic with a clear message when the wasm32-wasip2 std is not installed.
fn check_target() {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(sysroot) = sysroot
        && !Path::new(&sysroot)
            .join("lib/rustlib/wasm32-wasip2")
            .is_dir()
    {
        panic!(
            "the Rust target wasm32-wasip2 is not installed (needed to build the built-in plugins); run scripts/setup.sh (or `rustup target add wasm32-wasip2`)"
        );
    }
}

fn cargo_build(root: &Path, target_dir: &Path, packages: &[&str]) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "wasm-plugin",
            "--target-dir",
        ])
        .arg(target_dir);
    for p in packages {
        cmd.args(["-p", p]);
    }
    // The outer build's settings must not leak into the guest build.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key == "RUSTFLAGS"
            || key == "CARGO_ENCODED_RUSTFLAGS"
            || key == "CARGO_TARGET_DIR"
            || key == "CARGO_BUILD_TARGET"
            || key == "CARGO_BUILD_RUSTFLAGS"
            || key == "RUSTC_WORKSPACE_WRAPPER"
            || key == "RUSTC_WRAPPER"
            || key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_TARGET_")
            || key.starts_with("__CARGO")
        {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        Err(format!(
            "`cargo build --target wasm32-wasip2 -p {}` failed:\n{}",
            packages.join(" -p "),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }
}
