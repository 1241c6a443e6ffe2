//! The integration tests: one binary, one module per area (as wasmtime's `tests/all`). Fakes
//! shared with the unit tests live in `ragen_gym_starpo::testing` (feature `testing`); a helper
//! shared by several modules here would go in this file.
mod api_model;
mod authors;
mod builtin_envs;
mod child;
mod countdown;
mod cpu_threads;
mod docs;
mod expert;
mod failure_policy;
mod fork;
mod gigpo;
mod kill_resume;
mod layering;
mod learning;
mod net_hostile;
mod prefix_sharing;
mod python_plugin;
mod registry;
mod replay;
mod sandbox_capabilities;
mod sandbox_copy;
mod sandbox_hostile;
mod scoring_from_update;
mod serve;
mod servers;
mod shared_prefix;
mod starpo;
mod variance;
mod view;
mod webshop;
mod webshop_soak;

/// A tiny random Llama ([`learning::tiny_model`], seed 7) under `dir`: `train` runs on it in well
/// under a second per iteration (the kill and failure-policy tests).
fn tiny_model(dir: &std::path::Path) -> std::path::PathBuf {
    learning::tiny_model(&dir.join("tiny-model"), 7)
}
