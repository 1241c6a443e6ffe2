//! Build the hostile and test plugin fixtures (`tests/fixtures/*`) to wasm32-wasip2 components
//! with the same nested build as the built-ins (`ragen-gym-build-support`), and pass their paths
//! to the tests as `FIXTURE_<NAME>` env vars.

use ragen_gym_build_support as wasm;

/// (env var suffix, cargo package)
const FIXTURES: &[(&str, &str)] = &[
    ("HOSTILE", "ragen-hostile"),
    ("NOEXPORT", "ragen-hostile-noexport"),
    ("REWARD_LEN", "ragen-reward-len"),
    ("MISMATCH", "ragen-mismatch"),
    ("OLD_CONTRACT", "ragen-old-contract"),
];

fn main() {
    let root = wasm::workspace_root();
    wasm::rerun_if_changed(&root, &["tests/fixtures", "sdk", "wit"]);
    let packages: Vec<&str> = FIXTURES.iter().map(|f| f.1).collect();
    if let Err(e) = wasm::build(&root, &packages) {
        panic!("building the test fixtures failed: {e}");
    }
    for (var, package) in FIXTURES {
        println!(
            "cargo:rustc-env=FIXTURE_{var}={}",
            wasm::artifact(&root, package).display()
        );
    }
}
