//! Compile the built-in env plugins (`plugins/*`) to wasm32-wasip2 components with a nested
//! `cargo build` and embed them (see `src/lib.rs`). The nested build uses its own target dir
//! (`target/wasm-plugins`) and profile `wasm-plugin`, and drops the outer build's flags, the way
//! wasmtime's `crates/test-programs/artifacts/build.rs` builds its guests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (built-in name, cargo package, artifact stem, required)
const PLUGINS: &[(&str, &str, &str, bool)] = &[
    ("bandit", "ragen-bandit", "ragen_bandit", true),
    ("sokoban", "ragen-sokoban", "ragen_sokoban", true),
    ("frozenlake", "ragen-frozen-lake", "ragen_frozen_lake", true),
    (
        "webshop-bridge",
        "ragen-webshop-bridge",
        "ragen_webshop_bridge",
        false,
    ),
];

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest_dir
        .join("../..")
        .canonicalize()
        .expect("workspace root");
    for dir in ["plugins", "sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = root.join("target/wasm-plugins");
    check_target();

    let required: Vec<&str> = PLUGINS.iter().filter(|p| p.3).map(|p| p.1).collect();
    if let Err(e) = cargo_build(&root, &target_dir, &required) {
        panic!("building the built-in plugins failed: {e}");
    }
    let mut table = String::from(
        "/// Built-in plugins: (name, component bytes).\npub static BUILTINS: &[(&str, &[u8])] = &[\n",
    );
    for (name, package, stem, required) in PLUGINS {
        if !required && let Err(e) = cargo_build(&root, &target_dir, &[package]) {
            println!("cargo:warning=optional built-in `{name}` ({package}) not embedded: {e}");
            continue;
        }
        let artifact = target_dir.join(format!("wasm32-wasip2/wasm-plugin/{stem}.wasm"));
        if !required
            && !std::fs::read(&artifact).is_ok_and(|b| b.windows(12).any(|w| w == b"ragen:plugin"))
        {
            println!(
                "cargo:warning=optional built-in `{name}` not embedded: it has no `ragen:plugin` manifest yet"
            );
            continue;
        }
        let dest = out_dir.join(format!("{name}.wasm"));
        std::fs::copy(&artifact, &dest)
            .unwrap_or_else(|e| panic!("copying {} failed: {e}", artifact.display()));
        table.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            dest.display().to_string()
        ));
    }
    table.push_str("];\n");
    std::fs::write(out_dir.join("builtins.rs"), table).expect("write builtins.rs");
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
