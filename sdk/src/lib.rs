//! # ragen-gym-sdk: write ragen-gym environment plugins in Rust
//!
//! A plugin is a WebAssembly component (target `wasm32-wasip2`) that implements the
//! `ragen:gym/environment` interface of the WIT package in `wit/`. This crate gives plugin
//! authors one trait, [`Environment`], and one macro, [`export_env!`], which generates the
//! component bindings and embeds the plugin manifest in a custom section.
//!
//! The same env logic also builds natively (the macro expands to nothing off wasm), so it can be
//! unit-tested and benchmarked without a WASM runtime.
//!
//! See the crate README (`sdk/README.md`) for a complete plugin in under 40 lines.

extern crate self as ragen_gym_sdk;

pub mod config;
pub mod env;
pub mod export;
pub mod manifest;
pub mod types;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod bindings;
#[cfg(target_arch = "wasm32")]
mod guest;

#[cfg(target_arch = "wasm32")]
pub use guest::{LogLevel, http, log};
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub use config::parse_config;
pub use env::Environment;
pub use manifest::{INTERFACE_VERSION, MANIFEST_SECTION};
pub use types::{
    EnvError, EnvSpec, Metric, ResetResult, RewardBreakdown, StepResult, Symbol, Trajectory, Turn,
};
