//! # ragen-gym-builtins: the registry of built-in plugins
//!
//! One table, [`BUILTINS`], that every list of built-ins iterates over: the CLI's `PLUGIN`
//! resolver, `bench envs`, the env presets of `train` and `eval`, and the integration tests.
//! Each [`Builtin`] carries the plugin's embedded component (built from `plugins/*` for
//! wasm32-wasip2 by `build.rs`: Rust crates with cargo, Countdown's Python with
//! componentize-py), its training preset (`configs/<env>.toml`) and, when the env can run
//! outside the sandbox, a native constructor over the same env logic. The list itself
//! lives in this crate's `Cargo.toml` (`[[package.metadata.builtin]]`); adding a built-in env is
//! described in `docs/architecture.md`, "Adding a built-in env". The host loads the components
//! through the same sandbox as any third-party plugin.
//!
//! ```
//! let sokoban = ragen_gym_builtins::find("sokoban").expect("built in");
//! assert_eq!(&sokoban.wasm[..4], b"\0asm");
//! assert!(sokoban.preset.is_some() && sokoban.native.is_some());
//! assert_eq!(ragen_gym_builtins::find("frozen-lake").map(|b| b.name), Some("frozenlake"));
//! ```

#![deny(missing_docs)]

use ragen_gym_core::{Env, EnvCallError, NativeEnv};

/// Builds a native env from its JSON config (`""` = defaults).
pub type NativeConstructor = fn(&str) -> Result<Box<dyn Env>, EnvCallError>;

/// One built-in plugin.
pub struct Builtin {
    /// The name users type (`--env sokoban`).
    pub name: &'static str,
    /// Other spellings that resolve to it.
    pub aliases: &'static [&'static str],
    /// The cargo package the component is built from, or the directory of its Python or
    /// JavaScript project (`plugins/countdown`).
    pub package: &'static str,
    /// The component bytes (wasm32-wasip2).
    pub wasm: &'static [u8],
    /// The training config preset for this env (`configs/<env>.toml` text), if any.
    pub preset: Option<&'static str>,
    /// The env logic linked natively, if it can run outside the sandbox.
    pub native: Option<NativeConstructor>,
}

impl Builtin {
    /// Whether `name` is this built-in's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("package", &self.package)
            .field("wasm_bytes", &self.wasm.len())
            .field("preset", &self.preset.is_some())
            .field("native", &self.native.is_some())
            .finish()
    }
}

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The built-in called `name` (or aliased so).
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.answers_to(name))
}

/// Names of the built-ins, in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_is_a_component() {
        for b in BUILTINS {
            // Component binary header: magic, then version 0x0d with layer 1.
            assert_eq!(&b.wasm[..8], b"\0asm\x0d\x00\x01\x00", "{}", b.name);
        }
        assert!(find("nope").is_none());
    }

    #[test]
    fn names_and_aliases_resolve_to_their_entry() {
        assert_eq!(
            names().collect::<Vec<_>>(),
            [
                "bandit",
                "sokoban",
                "frozenlake",
                "webshop-bridge",
                "countdown"
            ]
        );
        for alias in ["frozenlake", "frozen-lake", "frozen_lake"] {
            assert_eq!(find(alias).map(|b| b.package), Some("ragen-frozen-lake"));
        }
    }

    #[test]
    fn natives_build_the_same_env_as_their_component_declares() {
        for b in BUILTINS.iter().filter(|b| b.native.is_some()) {
            let native =
                b.native.expect("filtered")("").unwrap_or_else(|e| panic!("{}: {e}", b.name));
            let id = &native.spec().id;
            assert!(
                b.wasm
                    .windows(id.len() + 7)
                    .any(|w| w == format!("\"id\":\"{id}\"").as_bytes()),
                "{}: the component's manifest does not name {id}",
                b.name
            );
        }
    }
}
