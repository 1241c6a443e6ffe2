//! Host imports available to plugins on wasm: [`log`] and [`http::fetch`].

pub use crate::bindings::ragen::gym::log::Level as LogLevel;

/// Write one line to the host's log, tagged with the plugin id. The host caps line length and
/// the number of lines per call.
pub fn log(level: LogLevel, message: &str) {
    crate::bindings::ragen::gym::log::log(level, message);
}

/// Outgoing HTTP through the host's capability gate.
pub mod http {
    pub use crate::bindings::ragen::gym::http::{HttpError, Request, Response};

    /// Perform a request. It is refused with [`HttpError::Denied`] unless the plugin's manifest
    /// declares the target `host:port` (`capabilities.http`) and the user granted it
    /// (`--allow-host`).
    pub fn fetch(request: &Request) -> Result<Response, HttpError> {
        crate::bindings::ragen::gym::http::fetch(request)
    }
}
