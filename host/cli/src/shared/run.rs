//! The sandbox and envs of a run, one recipe for every subcommand that runs an env plugin:
//! [`RunEnvs::load`] sizes the run's one sandbox from its config
//! ([`Config::live_env_instances`], plus one instance per reward function) and loads the env
//! plugin into it; [`new_env`] builds each env and [`env_factory`] hands that to the trainer.

use super::plugins::load_into;
use super::sandbox::SandboxArgs;
use ragen_gym_core::{Env, EnvCallError};
use ragen_gym_registry::{LockedPlugin, PluginRole};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, WasmEnv};
use ragen_gym_starpo::{Config, EnvFactory};

/// One env: a fresh sandboxed instance of `plugin`, configured with `env_config` (the env's
/// JSON config) and `grants`.
///
/// # Errors
/// The plugin refused the config or failed to instantiate.
pub fn new_env(
    plugin: &Plugin,
    env_config: &str,
    grants: Grants,
) -> Result<Box<dyn Env>, EnvCallError> {
    Ok(Box::new(WasmEnv::new(plugin, env_config, grants)?))
}

/// The trainer's env factory: [`new_env`] on every call.
pub fn env_factory(plugin: Plugin, env_config: String, grants: Grants) -> EnvFactory {
    Box::new(move || new_env(&plugin, &env_config, grants.clone()))
}

/// The env side of a run: its one sandbox, the env plugin loaded into it with its lock entry,
/// and the user's grants.
pub struct RunEnvs {
    /// The run's sandbox (reward-function plugins are loaded into it too).
    pub sandbox: Sandbox,
    /// The env plugin.
    pub plugin: Plugin,
    /// The env plugin's lock entry.
    pub lock: LockedPlugin,
    /// What every env of the run is granted.
    pub grants: Grants,
}

impl RunEnvs {
    /// Load the env plugin `spec` into a sandbox with room for every env `config` keeps alive
    /// at once ([`Config::live_env_instances`]) and `extra` more instances (one per reward
    /// function).
    ///
    /// # Errors
    /// As [`SandboxArgs::sandbox`], [`load_into`] and [`SandboxArgs::grants`].
    pub fn load(
        args: &SandboxArgs,
        config: &Config,
        spec: &str,
        extra: usize,
    ) -> anyhow::Result<Self> {
        let sandbox = args.sandbox(config.live_env_instances() + extra)?;
        let (plugin, lock) = load_into(&sandbox, spec, PluginRole::Env, &args.source)?;
        Ok(Self {
            sandbox,
            plugin,
            lock,
            grants: args.grants()?,
        })
    }

    /// The factory of the envs of a run on `config` (its `env.config`).
    pub fn factory(&self, config: &Config) -> EnvFactory {
        env_factory(
            self.plugin.clone(),
            config.env.config.clone(),
            self.grants.clone(),
        )
    }

    /// The env plugin's sha256, as the trainer records it.
    pub fn sha256(&self) -> String {
        self.plugin.info().sha256.clone()
    }
}
