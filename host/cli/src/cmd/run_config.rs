//! The config recipe that `train` and `eval --model` share ([`ConfigBuilder::for_env`]): the
//! embedded default, the CPU profile (when the model runs on the CPU, unless given
//! `--no-cpu-profile`), the env's preset when it is a built-in.

use ragen_gym_policy::Device;
use ragen_gym_starpo::config::env_preset;
use ragen_gym_starpo::{ConfigBuilder, ConfigError, EnvPreset, Profile};

/// The hardware profile: the CPU profile when the model runs on the CPU, unless the user opted
/// out; RAGEN's GPU-scale defaults on a GPU.
pub fn profile(device: &Device, no_cpu_profile: bool) -> Profile {
    if !device.is_cpu() || no_cpu_profile {
        Profile::Full
    } else {
        Profile::Cpu
    }
}

/// The base layers of a run on the plugin named `env` with the model on `device`.
pub fn base_config(
    env: &str,
    device: &Device,
    no_cpu_profile: bool,
) -> Result<ConfigBuilder, ConfigError> {
    let preset = env_preset(env).map(|toml| EnvPreset { name: env, toml });
    ConfigBuilder::for_env(preset, profile(device, no_cpu_profile))
}
