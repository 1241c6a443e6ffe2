//! # ragen-gym-sdk: write ragen-gym plugins in Rust
//!
//! A plugin is a WebAssembly component (target `wasm32-wasip2`) that implements an interface of
//! the WIT package in `wit/`. An environment implements [`Environment`] and calls
//! [`export_env!`]; a reward function implements [`RewardFunction`] and calls
//! [`export_reward!`]. The macros derive the plugin manifest (custom section
//! [`MANIFEST_SECTION`]) from the trait's `ID` and the crate's Cargo metadata, and generate the
//! component bindings on wasm.
//!
//! The same code builds natively (the macros then generate no bindings, [`log`] is a no-op and
//! [`http::fetch`] is refused), so it can be unit-tested and benchmarked without a WASM runtime.
//!
//! See the crate README (`sdk/README.md`) for a complete plugin in under 25 lines, and the
//! plugin author's guide, `docs/plugins.md` in the ragen-gym repository, for the contract, the
//! determinism rules, limits, capabilities, versioning and `ragen-gym new` / `build` (which
//! scaffolds and builds a plugin crate on this SDK).

extern crate self as ragen_gym_sdk;

pub mod adapter;
pub mod builders;
pub mod config;
pub mod env;
pub mod export;
pub mod imports;
pub mod manifest;
pub mod reward;
pub mod types;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod bindings;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub use config::parse_config;
pub use env::Environment;
pub use imports::{LogLevel, http, log};
pub use manifest::{Capabilities, INTERFACE_VERSION, Limits, MANIFEST_SECTION, Package};
pub use reward::RewardFunction;
pub use types::{
    Advice, EnvError, EnvSpec, ExpertInfo, Metric, ResetResult, RewardBreakdown, StepResult,
    Symbol, Trajectory, Turn,
};
