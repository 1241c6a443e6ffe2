//! # ragen-gym-sandbox: run untrusted environment plugins in wasmtime
//!
//! The only crate that depends on wasmtime. A plugin is a WASM component; this crate verifies
//! it without running it ([`inspect_bytes`]), compiles and caches it, and runs each env in its
//! own instance under fuel, epoch-deadline and memory limits with no WASI capability
//! (architecture note, "Sandbox rules").
//!
//! ```no_run
//! use ragen_gym_sandbox::{Grants, Sandbox, SandboxConfig};
//! use ragen_gym_core::Env;
//!
//! let sandbox = Sandbox::new(SandboxConfig::default()).unwrap();
//! let plugin = sandbox.load_file("sokoban.wasm".as_ref()).unwrap();
//! let mut env = plugin.new_env("", Grants::default()).unwrap();
//! let first = env.reset(42).unwrap();
//! let step = env.step("Up").unwrap();
//! # let _ = (first, step);
//! ```

#![deny(missing_docs)]

mod bindings;
mod cache;
pub mod config;
pub mod error;
pub mod http;
pub mod http_reqwest;
pub mod inspect;
pub mod output;
pub mod plugin;
pub mod reward;
pub mod sandbox;
mod state;
pub mod wasm_env;

pub use config::{Grants, SandboxConfig, default_cache_dir};
pub use error::LoadError;
pub use http::{CapabilityGranter, HostPort, HttpError, HttpRequest, HttpResponse, HttpTransport};
pub use http_reqwest::ReqwestTransport;
pub use inspect::{PluginInfo, inspect_bytes, sha256_hex};
pub use plugin::Plugin;
pub use reward::WasmRewardFunction;
pub use sandbox::Sandbox;
pub use wasm_env::WasmEnv;
