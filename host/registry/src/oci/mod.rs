//! The OCI side: a [`Session`] with one repository of one registry (authentication, bounded
//! requests), pulling (`pull`) and pushing (`push`) Wasm artifacts, and the checks a pulled
//! manifest must pass (`manifest`).

mod manifest;
mod pull;
mod push;
mod session;

pub(crate) use manifest::{check_manifest, parse_manifest};
pub(crate) use session::Session;
