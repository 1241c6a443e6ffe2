//! The module graph of every crate stays acyclic: `scripts/import_loops.py` (a module names a
//! path into another; parents and children and test code left out) finds no loop.

use std::process::Command;

#[test]
fn no_crate_has_an_import_loop() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent");
    let out = Command::new("python3")
        .arg(root.join("scripts/import_loops.py"))
        .current_dir(root)
        .output()
        .expect("python3 (scripts/setup.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "import loops:\n{text}");
    assert!(text.contains(" 0 import loop(s)"), "{text}");
}
