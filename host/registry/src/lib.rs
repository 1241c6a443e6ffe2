//! # ragen-gym-registry: plugins by reference, pinned by digest
//!
//! A plugin is named by a [`PluginRef`]: a local path, an `https://…/x.wasm#sha256=<hex>` URL
//! (`http://` only on a host the user granted), or an OCI reference
//! `oci://registry/namespace/name:tag` / `…@sha256:<digest>` in the CNCF Wasm OCI artifact format
//! (config `application/vnd.wasm.config.v0+json`, one `application/wasm` layer; the format
//! `wkg` and wasm-pkg-tools use). The [`Resolver`] fetches the component, checks it against
//! every digest it knows (the URL pin, the registry's, the lock file's), checks that it is a
//! component, and only then stores it in the [`PluginCache`] under its sha256 (temp file, fsync,
//! rename): a failed download never leaves a file behind. [`LockFile`] is `ragen-gym.lock`.
//!
//! ```no_run
//! use ragen_gym_registry::{PluginCache, PluginRef, ResolveOptions, Resolver};
//!
//! let cache = PluginCache::new("/tmp/ragen-gym-plugins");
//! let resolver = Resolver::new(cache, ResolveOptions::default());
//! let r: PluginRef = "oci://ghcr.io/acme/sokoban:0.1.0".parse().unwrap();
//! let plugin = resolver.resolve(&r, None).unwrap();
//! println!("{} is {}", plugin.reference, plugin.digest);
//! ```
//!
//! This crate takes no part in running plugins: it hands bytes to the sandbox.
#![deny(missing_docs)]

pub mod artifact;
pub mod cache;
pub mod digest;
pub mod error;
mod fetch;
pub mod lock;
mod oci;
pub mod reference;
pub mod resolve;

pub use artifact::{WasmComponentInfo, WasmConfig};
pub use cache::PluginCache;
pub use digest::{Digest, DigestError};
pub use error::{LockError, RegistryError};
pub use lock::{LOCK_FILE_NAME, LockFile, LockedPlugin, PluginRole};
pub use reference::PluginRef;
pub use resolve::{Origin, Published, ResolveOptions, Resolved, Resolver};
