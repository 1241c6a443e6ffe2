//! The base config layers of a run, shared by `train`, `eval --model` and `bench iteration`
//! ([`ConfigBuilder::for_env`]): the embedded default, the CPU profile (when the model runs on
//! the CPU, unless given `--no-cpu-profile`), the env's preset when it is a built-in (from the
//! registry, `ragen_gym_builtins`). The whole layer order is in `docs/architecture.md` section 1.

use ragen_gym_policy::Device;
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

/// The preset of the built-in named (or aliased) `env`, if it has one.
pub fn env_preset(env: &str) -> Option<EnvPreset<'static>> {
    let builtin = ragen_gym_builtins::find(env)?;
    Some(EnvPreset {
        name: builtin.name,
        toml: builtin.preset?,
    })
}

/// The base layers of a run on the plugin named `env` with the model on `device`.
pub fn base_config(
    env: &str,
    device: &Device,
    no_cpu_profile: bool,
) -> Result<ConfigBuilder, ConfigError> {
    ConfigBuilder::for_env(env_preset(env), profile(device, no_cpu_profile))
}
