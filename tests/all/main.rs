//! The integration tests: one binary, one module per area (as wasmtime's `tests/all`). Fakes
//! shared with the unit tests live in `ragen_gym_starpo::testing` (feature `testing`); a helper
//! shared by several modules here would go in this file.
mod api_model;
mod authors;
mod builtin_envs;
mod child;
mod countdown;
mod docs;
mod failure_policy;
mod kill_resume;
mod learning;
mod net_hostile;
mod prefix_sharing;
mod python_plugin;
mod registry;
mod replay;
mod sandbox_hostile;
mod scoring_from_update;
mod servers;
mod shared_prefix;
mod starpo;
mod variance;
mod webshop;
mod webshop_soak;

/// A tiny random Llama (`ModelConfig::tiny`: 2 layers, hidden size 32) with the default model's
/// tokenizer, written as a Hugging Face directory under `dir`: `train` runs on it in well under a
/// second per iteration (the kill and failure-policy tests).
fn tiny_model(dir: &std::path::Path) -> std::path::PathBuf {
    let mut loaded = ragen_gym_policy::load(&ragen_gym_policy::default_model_path())
        .expect("default model (run scripts/setup.sh)");
    let config = ragen_gym_policy::ModelConfig::tiny(loaded.config.vocab_size);
    loaded.weights =
        ragen_gym_policy::random_weights(&config, 7, &ragen_gym_policy::Device::Cpu).unwrap();
    loaded.config = config;
    let path = dir.join("tiny-model");
    loaded.save_pretrained(&path).unwrap();
    path
}
