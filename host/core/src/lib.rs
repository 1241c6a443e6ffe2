//! # ragen-gym-core: engine-free types shared by the host crates
//!
//! The env types mirror the WIT contract (`wit/types.wit`) and are the same Rust types plugin
//! authors use (re-exported from `ragen-gym-sdk`). [`Env`] is the host's view of one running
//! environment, implemented by the WASM sandbox (`ragen-gym-sandbox`) and by [`NativeEnv`] for
//! env logic compiled into the host (tests, benchmarks).

pub mod env;

pub use env::{Env, EnvCallError, NativeEnv};
pub use ragen_gym_sdk::{EnvError, EnvSpec, Metric, ResetResult, StepResult, Symbol};
