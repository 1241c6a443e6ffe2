//! Errors of the WebShop server crate.

/// What can go wrong loading a catalog or serving it.
#[derive(Debug, thiserror::Error)]
pub enum WebShopError {
    /// The catalog file could not be read.
    #[error("read catalog {path}: {reason}")]
    CatalogRead {
        /// File path.
        path: String,
        /// OS error.
        reason: String,
    },
    /// The catalog is not valid JSON of the expected shape.
    #[error("parse catalog {origin}: {reason}")]
    CatalogParse {
        /// File path or `<embedded catalog>`.
        origin: String,
        /// serde_json's message (with line and column).
        reason: String,
    },
    /// The catalog parsed but a field is unusable.
    #[error("invalid catalog {origin}: field `{field}` {reason}")]
    CatalogInvalid {
        /// File path or `<embedded catalog>`.
        origin: String,
        /// JSON path of the field.
        field: String,
        /// Why it is unusable.
        reason: String,
    },
    /// The listening socket could not be bound.
    #[error("bind webshop server on {addr}: {reason}")]
    Bind {
        /// Requested address.
        addr: String,
        /// The error.
        reason: String,
    },
}
