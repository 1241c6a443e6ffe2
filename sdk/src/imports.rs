//! What a plugin may call on the host: [`log`] and [`http::fetch`]. Both compile on every
//! target, so plugin code needs no `cfg` guards: on wasm they are the host imports
//! `ragen:gym/log` and `ragen:gym/http`; natively (unit tests, the host's native envs) `log` is
//! a no-op and `fetch` returns [`http::HttpError::Denied`].

/// Severity of a log line (WIT `log.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Verbose diagnostics.
    Debug,
    /// Normal progress.
    Info,
    /// Something looks wrong but the plugin carries on.
    Warn,
    /// Something failed.
    Error,
}

/// Write one line to the host's log, tagged with the plugin id. The host caps line length and
/// the number of lines per call. A no-op off wasm.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::env_world::ragen::gym::log::{Level, log};
        let level = match level {
            LogLevel::Debug => Level::Debug,
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
            LogLevel::Error => Level::Error,
        };
        log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (level, message);
}

/// Outgoing HTTP through the host's capability gate.
pub mod http {
    /// An HTTP request (WIT `http.request`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Request {
        /// `GET` or `POST`.
        pub method: String,
        /// Absolute `http://` or `https://` URL.
        pub url: String,
        /// Header name/value pairs.
        pub headers: Vec<(String, String)>,
        /// Request body (empty for `GET`).
        pub body: Vec<u8>,
    }

    /// An HTTP response (WIT `http.response`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Response {
        /// Status code.
        pub status: u16,
        /// Header name/value pairs.
        pub headers: Vec<(String, String)>,
        /// Response body, at most the host's size cap.
        pub body: Vec<u8>,
    }

    /// Why a request produced no response (WIT `http.http-error`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum HttpError {
        /// The target is not declared by the plugin or not granted by the user.
        Denied(String),
        /// The URL or method is malformed or not http/https.
        InvalidRequest(String),
        /// No response within the host's timeout.
        Timeout,
        /// The response body exceeded the host's size cap.
        TooLarge,
        /// Connection or protocol failure.
        Transport(String),
    }

    impl std::fmt::Display for HttpError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Self::Denied(m) => write!(f, "denied by the host: {m}"),
                Self::InvalidRequest(m) => write!(f, "invalid request: {m}"),
                Self::Timeout => write!(f, "timed out"),
                Self::TooLarge => write!(f, "response too large"),
                Self::Transport(m) => write!(f, "transport error: {m}"),
            }
        }
    }

    impl std::error::Error for HttpError {}

    /// Perform a request. Refused with [`HttpError::Denied`] unless the plugin declares the
    /// target `host:port` ([`Capabilities::http`](crate::manifest::Capabilities::http)) and the
    /// user granted it (`--allow-host`); always refused off wasm.
    ///
    /// # Errors
    /// [`HttpError`] when no response arrives.
    pub fn fetch(request: &Request) -> Result<Response, HttpError> {
        #[cfg(target_arch = "wasm32")]
        {
            use crate::bindings::env_world::ragen::gym::http as wit;
            let request = wit::Request {
                method: request.method.clone(),
                url: request.url.clone(),
                headers: request.headers.clone(),
                body: request.body.clone(),
            };
            match wit::fetch(&request) {
                Ok(r) => Ok(Response {
                    status: r.status,
                    headers: r.headers,
                    body: r.body,
                }),
                Err(wit::HttpError::Denied(m)) => Err(HttpError::Denied(m)),
                Err(wit::HttpError::InvalidRequest(m)) => Err(HttpError::InvalidRequest(m)),
                Err(wit::HttpError::Timeout) => Err(HttpError::Timeout),
                Err(wit::HttpError::TooLarge) => Err(HttpError::TooLarge),
                Err(wit::HttpError::Transport(m)) => Err(HttpError::Transport(m)),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            Err(HttpError::Denied(format!(
                "{} {}: no host outside the sandbox (a native build)",
                request.method, request.url
            )))
        }
    }
}
