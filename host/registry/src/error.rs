//! Typed failures of resolving, fetching, publishing and locking plugins. Messages are lowercase
//! fragments that name the reference or URL; no variant prints a source it also carries.

use crate::digest::Digest;
use ragen_gym_core::PluginFileError;
use ragen_gym_net::NetError;
use std::path::PathBuf;

pub use crate::reference::InvalidReference;

/// Why a plugin reference could not be turned into verified component bytes (or published).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The reference does not parse.
    #[error(transparent)]
    InvalidReference(#[from] InvalidReference),
    /// A URL without a `#sha256=` pin, not allowed by `--allow-unpinned` nor pinned by a lock.
    #[error(
        "{url} has no `#sha256=<hex>` pin: add one, lock it (--locked), or pass --allow-unpinned"
    )]
    Unpinned {
        /// The URL.
        url: String,
    },
    /// Plain HTTP to a host the user did not grant.
    #[error("{url} uses plain HTTP, allowed only on a granted host (--insecure-registry {host})")]
    InsecureHost {
        /// The URL or reference.
        url: String,
        /// Its `HOST:PORT`.
        host: String,
    },
    /// A network read failed or hit a bound (byte cap, deadline, minimum rate), or a request
    /// or redirect hop was not granted.
    #[error(transparent)]
    Net(#[from] NetError),
    /// An OCI layer names a foreign URL on a host the user did not grant.
    #[error(
        "{reference}: its layer lists the foreign URL {url}, and {host} is not a granted host ({grant}), so it is not contacted"
    )]
    ForeignLayerRefused {
        /// The reference.
        reference: String,
        /// The foreign URL (credentials redacted).
        url: String,
        /// Its `HOST:PORT`.
        host: String,
        /// The flag that would grant it.
        grant: String,
    },
    /// The server answered with an error status.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The artifact or tag does not exist in the registry.
    #[error("{reference} was not found in the registry: {reason}")]
    NotFound {
        /// The OCI reference.
        reference: String,
        /// The registry's message.
        reason: String,
    },
    /// The artifact announces more bytes than the plugin cap.
    #[error("{url} is larger than the {limit}-byte cap for a plugin")]
    TooLarge {
        /// The URL or blob.
        url: String,
        /// The cap, bytes.
        limit: u64,
    },
    /// The bytes do not have the digest the reference pins.
    #[error("{reference}: digest mismatch, expected {expected}, got {actual}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// The plugin differs from the one the lock file records.
    #[error(
        "{reference}: digest {found} differs from the locked {locked} ({lock}); the plugin changed since the lock was written"
    )]
    LockMismatch {
        /// The reference.
        reference: String,
        /// The digest in the lock file.
        locked: Digest,
        /// The digest found now.
        found: Digest,
        /// The lock file.
        lock: PathBuf,
    },
    /// The bytes are not a WebAssembly component.
    #[error("{reference} is not a WebAssembly component: {reason}")]
    NotAComponent {
        /// The reference.
        reference: String,
        /// A core module, or not wasm at all.
        reason: String,
    },
    /// The OCI artifact is not in the Wasm OCI artifact format.
    #[error("{reference} is not a Wasm OCI artifact: {reason}")]
    NotAWasmArtifact {
        /// The reference.
        reference: String,
        /// Which media type or layer count is wrong.
        reason: String,
    },
    /// Any other registry failure (authentication, protocol).
    #[error("registry request for {reference} failed: {reason}")]
    Registry {
        /// The reference.
        reference: String,
        /// The client's message.
        reason: String,
    },
    /// A local plugin file could not be read, is not a regular file, or is over the cap.
    #[error(transparent)]
    File(#[from] PluginFileError),
    /// The cache could not be written.
    #[error("failed to write the plugin cache at {}", path.display())]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The async runtime could not start.
    #[error("failed to start the network runtime")]
    Runtime(#[source] std::io::Error),
}

/// Why a lock file could not be read, written or satisfied.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The file could not be read or written.
    #[error("failed to access lock file {}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid lock file.
    #[error("lock file {} is invalid: {reason}", path.display())]
    Parse {
        /// The lock file.
        path: PathBuf,
        /// The TOML error.
        reason: String,
    },
    /// The run uses a plugin the lock does not record.
    #[error("{role} plugin {reference} is not in lock file {}", path.display())]
    NotLocked {
        /// `env` or `reward`.
        role: String,
        /// The reference.
        reference: String,
        /// The lock file.
        path: PathBuf,
    },
}
