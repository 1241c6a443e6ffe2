//! # ragen-gym-net: bounded network reads
//!
//! Everything ragen-gym reads from a network (plugin downloads by URL, OCI registries, API
//! models) goes through one [`Client`]: a reqwest client that checks its [`Grants`] before each
//! request and on every redirect hop, and reads bodies under [`Limits`] (a cap on the bytes
//! received, an overall deadline, a minimum rate). A failure is a [`NetError`] that names the URL
//! and the bound that was hit. [`redact`] keeps credentials out of what is stored or printed.
#![deny(missing_docs)]

mod body;
pub mod client;
pub mod error;
pub mod grants;
pub mod limits;
pub mod redact;

pub use client::{Client, MAX_REDIRECTS, Response};
pub use error::{NetError, chain};
pub use grants::{Grants, NotGranted, host_port};
pub use limits::{Limits, MinRate, Seconds};
pub use redact::{REDACTED, has_credentials, redact_secret, redact_url};
pub use reqwest::{Method, Url, header};
