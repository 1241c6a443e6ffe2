//! Derive the SDK's `INTERFACE_VERSION` from the one place it is written: the WIT package line
//! `package ragen:gym@X.Y.Z;` in `wit/worlds.wit`. The host reads the same constant (through
//! `ragen_gym_core::version`), so a WIT version bump needs no other edit to the Rust code.

use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let worlds = manifest_dir.join("../wit/worlds.wit");
    println!("cargo:rerun-if-changed={}", worlds.display());
    let text = std::fs::read_to_string(&worlds)
        .unwrap_or_else(|e| panic!("reading {}: {e}", worlds.display()));
    let version = text
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("package ragen:gym@")?
                .strip_suffix(';')
        })
        .unwrap_or_else(|| {
            panic!(
                "{} has no `package ragen:gym@X.Y.Z;` line",
                worlds.display()
            )
        });
    let parts: Vec<&str> = version.split('.').collect();
    assert!(
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
        "{}: the package version `{version}` is not MAJOR.MINOR.PATCH",
        worlds.display()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("interface_version.rs"),
        format!(
            "/// Version of the WIT package (`ragen:gym`) this SDK builds against, read from\n\
             /// `wit/worlds.wit` by `sdk/build.rs`.\n\
             pub const INTERFACE_VERSION: &str = {version:?};\n"
        ),
    )
    .expect("write interface_version.rs");
}
