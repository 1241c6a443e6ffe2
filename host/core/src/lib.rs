//! # ragen-gym-core: the engine-free contract types shared by the host crates
//!
//! Everything the trainer, the sandbox and the CLI agree on, without wasmtime or candle:
//!
//! - [`Env`], the host's view of one running environment (implemented by the sandbox's
//!   `WasmEnv` and by [`NativeEnv`]), with its counters [`EnvStats`] and its error
//!   [`EnvCallError`];
//! - [`PluginFailure`], a typed trap or broken sandbox rule, with the plugin's identity;
//! - [`Trajectory`], [`Turn`] and [`Step`], what a rollout records (with the [`TokenTrace`] of
//!   a response sampled under constrained decoding), and [`replay_trajectory`], which re-runs
//!   one against an env and finds the first difference, and [`fork`], which rebuilds the state
//!   after any recorded step the same way;
//! - [`RewardFunction`], what scores a trajectory;
//! - the plugin [`Manifest`] and the interface version rule ([`version`]);
//! - [`check_env`] and [`check_reward`], the conformance checkers every plugin runs through,
//!   and [`follow_expert`], one episode of an env's expert;
//! - [`read_plugin_file`], a local plugin file read under the plugin size cap.
//!
//! The env records (`EnvSpec`, `StepResult`, ...) mirror the WIT contract (`wit/types.wit`) and
//! are the same Rust types plugin authors use: they are defined once, in `ragen-gym-sdk`, and
//! re-exported here. See `docs/architecture.md` for the crate boundaries.

#![deny(missing_docs)]

pub mod cache;
pub mod check;
pub mod check_expert;
pub mod check_reward;
pub mod env;
pub mod failure;
pub mod fork;
pub mod manifest;
pub mod plugin_file;
pub mod replay;
pub mod reward;
pub mod rng;
pub mod trace;
pub mod trajectory;
pub mod version;

pub use cache::cache_root;
pub use check::{CheckReport, check_env};
pub use check_expert::{ExpertEpisode, follow_expert};
pub use check_reward::check_reward;
pub use env::{Env, EnvCallError, EnvStats, NativeEnv};
pub use failure::{EpisodeFailure, PluginFailure, PluginFailureKind};
pub use fork::{ForkError, ForkPoint, Forked, fork, fork_in_place, record_actions};
pub use manifest::{
    Capabilities, MANIFEST_SECTION, MAX_ID_BYTES, Manifest, ManifestLimits, PluginKind, check_id,
};
pub use plugin_file::{MAX_PLUGIN_BYTES, PluginFileError, read_plugin_file};
pub use ragen_gym_sdk::{
    Advice, EnvError, EnvSpec, ExpertInfo, Metric, ResetResult, RewardBreakdown, StepResult, Symbol,
};
pub use replay::{Divergence, ReplaySummary, replay_trajectory};
pub use reward::{RewardError, RewardFunction};
pub use rng::splitmix64;
pub use trace::{TokenOrigin, TokenTrace};
pub use trajectory::{Step, Trajectory, Turn};
pub use version::{
    INTERFACE_VERSION, InterfaceMismatch, OLDEST_COMPATIBLE_INTERFACE, check_interface_version,
};
