//! # ragen-gym-sandbox: run untrusted plugins in wasmtime
//!
//! The only crate that depends on wasmtime. A plugin is a WASM component; this crate verifies
//! it without running it ([`inspect_bytes`]), compiles and caches it, and runs each env in its
//! own instance under fuel, epoch-deadline and memory limits with no WASI capability
//! (`docs/architecture.md`, "Sandbox rules").
//!
//! ```no_run
//! use ragen_gym_core::Env;
//! use ragen_gym_sandbox::{Grants, Sandbox, SandboxConfig, WasmEnv};
//!
//! let sandbox = Sandbox::builder().config(SandboxConfig::default()).build().unwrap();
//! let plugin = sandbox.load_file("sokoban.wasm".as_ref()).unwrap();
//! let mut env = WasmEnv::new(&plugin, "", Grants::default()).unwrap();
//! let first = env.reset(42).unwrap();
//! let step = env.step("Up").unwrap();
//! # let _ = (first, step);
//! ```
//!
//! Modules, in dependency order (no cycles): [`limits`] (every cap) ← `engine` (wasmtime
//! engine, linker, epoch ticker) ← `plugin` ([`Plugin`]: stores, budgets, trap classification)
//! ← `env` ([`WasmEnv`]) and `reward` ([`WasmRewardFunction`]); `load` ([`Sandbox`]) uses
//! `inspect` and `cache` to make plugins. `bindings` (one `bindgen!`), `imports` (the `log` and
//! `http` host imports), `state` (per-instance WASI state) and `output` (checks on plugin output)
//! serve them.

#![deny(missing_docs)]

mod bindings;
mod cache;
mod call;
mod engine;
mod env;
mod error;
mod grants;
pub mod http;
mod http_reqwest;
mod imports;
mod inspect;
mod lift;
mod lifted;
pub mod limits;
mod load;
mod output;
mod plugin;
#[cfg(test)]
mod proptests;
mod reward;
mod state;

pub use cache::default_cache_dir;
pub use env::WasmEnv;
pub use error::LoadError;
pub use grants::Grants;
pub use http::{
    CapabilityGranter, HostPort, HostPortError, HttpError, HttpRequest, HttpResponse, HttpTransport,
};
pub use http_reqwest::ReqwestTransport;
pub use inspect::{PluginInfo, inspect_bytes, sha256_hex};
pub use limits::SandboxConfig;
pub use load::{Sandbox, SandboxBuilder};
pub use plugin::Plugin;
pub use reward::WasmRewardFunction;
