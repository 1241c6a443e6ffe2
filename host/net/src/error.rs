//! [`NetError`]: why a bounded read failed. Every message names the URL (credentials redacted)
//! and, for a bound that was hit, the bound.

use crate::grants::NotGranted;
use crate::limits::{MinRate, Seconds};
use std::time::Duration;

/// Why a request or its body failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// The URL itself is not granted.
    #[error(transparent)]
    NotGranted(#[from] NotGranted),
    /// A redirect hop leads to a URL the grants refuse; it was not followed.
    #[error("{url} redirected to {}, which is refused: {}", hop.url, hop.reason)]
    RedirectRefused {
        /// The URL requested.
        url: String,
        /// The refused hop.
        hop: NotGranted,
    },
    /// More redirects than the client follows.
    #[error("{url}: more than {max} redirects")]
    TooManyRedirects {
        /// The URL requested.
        url: String,
        /// Hops followed at most.
        max: usize,
    },
    /// No connection or no HTTP response (refused, DNS, TLS, protocol).
    #[error("{url} is unreachable: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// What the client saw.
        reason: String,
    },
    /// The response announced or sent more than the byte cap.
    #[error("{url}: {}", announced.map_or_else(|| format!("more than the cap of {max_bytes} bytes arrived"), |n| format!("the response announces {n} bytes, more than the cap of {max_bytes} bytes")))]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap.
        max_bytes: u64,
        /// The Content-Length, when the refusal came from it.
        announced: Option<u64>,
    },
    /// The read did not finish within the overall deadline.
    #[error("{url}: not complete within the deadline of {} ({received} body bytes received)", Seconds(*deadline))]
    Deadline {
        /// The URL.
        url: String,
        /// The deadline.
        deadline: Duration,
        /// Body bytes received by then.
        received: u64,
    },
    /// The response headers did not arrive in time.
    #[error("{url}: no response headers within {}", Seconds(*timeout))]
    HeadTimeout {
        /// The URL.
        url: String,
        /// The wait allowed.
        timeout: Duration,
    },
    /// The body arrived slower than the minimum rate.
    #[error(
        "{url}: slower than the minimum rate of {rate} ({in_window} bytes in the last window, {received} in all)"
    )]
    TooSlow {
        /// The URL.
        url: String,
        /// The floor.
        rate: MinRate,
        /// Bytes in the window that fell short.
        in_window: u64,
        /// Body bytes received in all.
        received: u64,
    },
    /// The body ended (or broke off) before its announced length.
    #[error("{url}: the body was cut short after {received} bytes{}", expected.map_or(String::new(), |e| format!(" of {e}")))]
    Truncated {
        /// The URL.
        url: String,
        /// Bytes announced, when known.
        expected: Option<u64>,
        /// Bytes received.
        received: u64,
    },
    /// The HTTP client or its runtime could not be set up.
    #[error("failed to set up the HTTP client: {reason}")]
    Setup {
        /// Why.
        reason: String,
    },
}

impl NetError {
    /// Whether retrying the same request may help (no response, or a body that broke off).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. } | Self::Truncated { .. } | Self::HeadTimeout { .. }
        )
    }
}

/// The message of an error and all its sources, `a: b: c` (reqwest keeps the OS error, e.g.
/// "Connection refused", in the chain).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}
