//! # ragen-gym-build-support: the nested wasm32-wasip2 build of plugin crates
//!
//! Used by the build scripts of `host/builtins` (the built-in plugins) and `tests` (the test
//! fixtures). Each runs a nested `cargo build --target wasm32-wasip2 --profile wasm-plugin` of
//! workspace packages into `target/wasm-plugins`, with the outer build's flags removed so they
//! cannot leak into the guest build, the way wasmtime's
//! `crates/test-programs/artifacts/build.rs` builds its guest programs.
//!
//! It also builds plugin *projects* the way `ragen-gym build` does (and `host/builtins` does for
//! a built-in written in Python): [`project`] reads one, [`cargo_project`] builds a Rust crate
//! outside the workspace, [`componentize`] a Python or JavaScript project with the componentizer
//! [`tools`] finds, and [`manifest`] writes the manifest section of the latter two.

pub mod cargo_project;
pub mod componentize;
pub mod error;
pub mod manifest;
pub mod project;
pub mod tools;

pub use error::BuildError;
pub use project::{Language, Project};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest target.
pub const WASM_TARGET: &str = "wasm32-wasip2";
/// The cargo profile of guest builds (root `Cargo.toml`: size-optimised, `panic = "abort"`).
pub const WASM_PROFILE: &str = "wasm-plugin";

/// The workspace root: the nearest ancestor of `CARGO_MANIFEST_DIR` whose `Cargo.toml` has a
/// `[workspace]` table.
///
/// # Panics
/// Outside a build script, or when no ancestor is a workspace root.
pub fn workspace_root() -> PathBuf {
    let start = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|text| text.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace root above {}", start.display()))
        .to_path_buf()
}

/// Where guest builds go: `<root>/target/wasm-plugins`, apart from the host's target dir so the
/// two builds never wait on each other's lock.
pub fn target_dir(root: &Path) -> PathBuf {
    root.join("target/wasm-plugins")
}

/// The component file cargo writes for `package`.
pub fn artifact(root: &Path, package: &str) -> PathBuf {
    target_dir(root).join(format!(
        "{WASM_TARGET}/{WASM_PROFILE}/{}.wasm",
        package.replace('-', "_")
    ))
}

/// Ask cargo to rerun the build script when anything under these root-relative paths changes.
pub fn rerun_if_changed(root: &Path, paths: &[&str]) {
    for p in paths {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
}

/// Build `packages` for [`WASM_TARGET`] with profile [`WASM_PROFILE`].
///
/// # Errors
/// [`BuildError::TargetMissing`] when the Rust target is not installed;
/// [`BuildError::CommandFailed`] with the command and the tail of cargo's stderr when cargo
/// cannot be run or the build fails.
pub fn build(root: &Path, packages: &[&str]) -> Result<(), BuildError> {
    check_target()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--target", WASM_TARGET, "--profile", WASM_PROFILE])
        .arg("--target-dir")
        .arg(target_dir(root));
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
    tools::run(&mut cmd).map(drop)
}

/// [`BuildError::TargetMissing`] when the wasm32-wasip2 standard library is not installed.
pub(crate) fn check_target() -> Result<(), BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match sysroot {
        Some(sysroot)
            if !Path::new(&sysroot)
                .join(format!("lib/rustlib/{WASM_TARGET}"))
                .is_dir() =>
        {
            Err(BuildError::TargetMissing {
                target: WASM_TARGET,
            })
        }
        _ => Ok(()),
    }
}
