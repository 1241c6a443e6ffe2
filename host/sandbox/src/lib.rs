//! # ragen-gym-sandbox: run untrusted environment plugins in wasmtime
//!
//! The only crate that depends on wasmtime. See `shared/design/architecture.md`, "Sandbox rules".

pub mod http;

pub use http::{CapabilityGranter, HostPort, HttpError, HttpRequest, HttpResponse, HttpTransport};
