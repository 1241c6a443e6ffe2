//! The config recipe that `train` and `eval --model` share ([`ConfigBuilder::for_env`]): the
//! embedded default, the CPU profile (unless built with CUDA or given `--no-cpu-profile`), the
//! env's preset when it is a built-in.

use ragen_gym_starpo::config::env_preset;
use ragen_gym_starpo::{ConfigBuilder, ConfigError, EnvPreset, Profile};

/// The hardware profile: the CPU profile unless the binary has CUDA or the user opted out.
pub fn profile(no_cpu_profile: bool) -> Profile {
    if cfg!(feature = "cuda") || no_cpu_profile {
        Profile::Full
    } else {
        Profile::Cpu
    }
}

/// The base layers of a run on the plugin named `env`.
pub fn base_config(env: &str, no_cpu_profile: bool) -> Result<ConfigBuilder, ConfigError> {
    let preset = env_preset(env).map(|toml| EnvPreset { name: env, toml });
    ConfigBuilder::for_env(preset, profile(no_cpu_profile))
}
