//! The `ragen:gym/http` host import: a capability gate in front of a pluggable transport.
//!
//! A request leaves the sandbox only when the target `host:port` is **declared** in the plugin's
//! manifest (`capabilities.http`) **and granted** by the user (`--allow-host HOST:PORT`). Both
//! are checked on every call (`docs/architecture.md`, "Sandbox rules"; Zed's
//! `crates/extension_host/src/capability_granter.rs`).
//! Only `http://` and `https://` URLs are accepted. A refusal reaches the guest as
//! `http-error::denied` and is counted. With no [`HttpTransport`] configured, an allowed call
//! fails with `http-error::transport`.

use crate::limits::MAX_URL_CHARS_IN_MESSAGES;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An outgoing HTTP request (mirror of the WIT `http.request` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// Header name/value pairs.
    pub headers: Vec<(String, String)>,
    /// Request body (empty for `GET`).
    pub body: Vec<u8>,
}

/// An HTTP response (mirror of the WIT `http.response` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header name/value pairs.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Vec<u8>,
}

/// Why a request produced no response (mirror of the WIT `http-error` variant).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Not declared by the plugin or not granted by the user.
    #[error("http request denied: {0}")]
    Denied(String),
    /// Malformed URL or method, or a scheme other than http/https.
    #[error("invalid http request: {0}")]
    InvalidRequest(String),
    /// No response within the transport's timeout.
    #[error("http request timed out")]
    Timeout,
    /// The response body exceeded the size cap.
    #[error("http response too large")]
    TooLarge,
    /// Connection or protocol failure.
    #[error("http transport failed: {0}")]
    Transport(String),
}

/// Performs requests that passed the capability gate. The sandbox ships none; the WebShop bridge
/// plugs in a real client. Implementations must not follow redirects to other hosts and should
/// cap response sizes ([`HttpError::TooLarge`]).
pub trait HttpTransport: Send + Sync {
    /// Perform one request.
    fn fetch(&self, req: HttpRequest) -> Result<HttpResponse, HttpError>;
}

/// A `host:port` pair, host lowercased. Written `HOST:PORT` (IPv6 as `[::1]:8080`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host name or IP literal, lowercase, IPv6 without brackets.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// Why a string is not a [`HostPort`]; each names the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    /// No `:PORT`.
    #[error("`{input}` is not `HOST:PORT`")]
    NotHostPort {
        /// The string as given.
        input: String,
    },
    /// A `[` without `]:PORT`.
    #[error("`{input}` is not `[IPV6]:PORT`")]
    NotIpv6HostPort {
        /// The string as given.
        input: String,
    },
    /// An empty host, or one with `/`, `@` or a space.
    #[error("`{input}` has an invalid host")]
    Host {
        /// The string as given.
        input: String,
    },
    /// A port that is not a number in `0..=65535`.
    #[error("`{input}` has an invalid port `{port}`")]
    Port {
        /// The string as given.
        input: String,
        /// The port as written.
        port: String,
    },
}

impl HostPort {
    /// Parse `HOST:PORT`.
    ///
    /// # Errors
    /// A [`HostPortError`] naming the input when the port is missing or not a number, or the host
    /// is empty.
    pub fn parse(s: &str) -> Result<Self, HostPortError> {
        let input = || s.to_string();
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            rest.split_once("]:")
                .ok_or_else(|| HostPortError::NotIpv6HostPort { input: input() })?
        } else {
            s.rsplit_once(':')
                .ok_or_else(|| HostPortError::NotHostPort { input: input() })?
        };
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(HostPortError::Host { input: input() });
        }
        let port: u16 = port.parse().map_err(|_| HostPortError::Port {
            input: input(),
            port: port.to_string(),
        })?;
        Ok(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// The `host:port` target of an `http://` or `https://` URL (default ports 80 and 443).
    ///
    /// # Errors
    /// [`HttpError::InvalidRequest`] for other schemes, user info, or a malformed authority.
    pub fn of_url(url: &str) -> Result<Self, HttpError> {
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        let (rest, default_port) = if lower.starts_with("http://") {
            (&url[7..], 80)
        } else if lower.starts_with("https://") {
            (&url[8..], 443)
        } else {
            return Err(HttpError::InvalidRequest(format!(
                "only http and https URLs are allowed, got `{}`",
                truncate(url)
            )));
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return Err(HttpError::InvalidRequest(
                "URLs with user info are not allowed".into(),
            ));
        }
        if authority.is_empty() {
            return Err(HttpError::InvalidRequest(format!(
                "URL `{}` has no host",
                truncate(url)
            )));
        }
        let has_port = if authority.starts_with('[') {
            authority.contains("]:")
        } else {
            authority.contains(':')
        };
        if has_port {
            Self::parse(authority).map_err(|e| HttpError::InvalidRequest(e.to_string()))
        } else {
            let host = authority.trim_start_matches('[').trim_end_matches(']');
            Ok(Self {
                host: host.to_ascii_lowercase(),
                port: default_port,
            })
        }
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(MAX_URL_CHARS_IN_MESSAGES) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Decides whether a plugin may reach a `host:port`: allowed only when the plugin declared it
/// and the user granted it.
#[derive(Debug, Clone, Default)]
pub struct CapabilityGranter {
    declared: Vec<HostPort>,
    granted: Vec<HostPort>,
}

impl CapabilityGranter {
    /// A granter over the manifest's declared targets and the user's grants.
    pub fn new(declared: Vec<HostPort>, granted: Vec<HostPort>) -> Self {
        Self { declared, granted }
    }

    /// Whether the plugin declared any HTTP target.
    pub fn declares_http(&self) -> bool {
        !self.declared.is_empty()
    }

    /// Check one URL.
    ///
    /// # Errors
    /// [`HttpError::InvalidRequest`] for a bad URL, [`HttpError::Denied`] naming the target and
    /// which side (manifest or user) did not allow it.
    pub fn check_url(&self, url: &str) -> Result<HostPort, HttpError> {
        let target = HostPort::of_url(url)?;
        let declared = self.declared.contains(&target);
        let granted = self.granted.contains(&target);
        match (declared, granted) {
            (true, true) => Ok(target),
            (false, _) => Err(HttpError::Denied(format!(
                "{target} is not declared in the plugin manifest"
            ))),
            (true, false) => Err(HttpError::Denied(format!(
                "{target} is not granted (use --allow-host {target})"
            ))),
        }
    }
}

/// The per-instance HTTP gate: granter, transport, and counters.
pub(crate) struct HttpGate {
    pub(crate) granter: CapabilityGranter,
    pub(crate) transport: Option<Arc<dyn HttpTransport>>,
    pub(crate) denied: Arc<AtomicU64>,
    pub(crate) max_body_bytes: usize,
}

impl HttpGate {
    /// The method is GET or POST and the URL's host and port are declared and granted (a
    /// denial is counted and logged). The `fetch` import asks this before it reads a header.
    pub(crate) fn admit(&self, method: &str, url: &str) -> Result<(), HttpError> {
        if !method.eq_ignore_ascii_case("GET") && !method.eq_ignore_ascii_case("POST") {
            return Err(HttpError::InvalidRequest(format!(
                "method `{}` is not allowed (GET or POST)",
                truncate(method)
            )));
        }
        if let Err(e) = self.granter.check_url(url) {
            if matches!(e, HttpError::Denied(_)) {
                self.denied.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(url = truncate(url), "{e}");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Run one guest request through the gate.
    pub(crate) fn fetch(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.admit(&req.method, &req.url)?;
        let method = req.method.to_ascii_uppercase();
        if req.body.len() > self.max_body_bytes {
            return Err(HttpError::InvalidRequest(format!(
                "request body of {} bytes exceeds the cap",
                req.body.len()
            )));
        }
        let Some(transport) = &self.transport else {
            return Err(HttpError::Transport(
                "no http transport is configured in this host".into(),
            ));
        };
        let resp = transport.fetch(HttpRequest { method, ..req })?;
        if resp.body.len() > self.max_body_bytes {
            return Err(HttpError::TooLarge);
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(s: &str) -> HostPort {
        HostPort::parse(s).unwrap()
    }

    #[test]
    fn granter_table_declared_by_granted() {
        let a = "127.0.0.1:3000";
        let b = "example.com:443";
        // (declared, granted, url, allowed)
        let table: &[(&[&str], &[&str], &str, bool)] = &[
            (&[], &[], "http://127.0.0.1:3000/x", false),
            (&[a], &[], "http://127.0.0.1:3000/x", false),
            (&[], &[a], "http://127.0.0.1:3000/x", false),
            (&[a], &[a], "http://127.0.0.1:3000/x", true),
            (&[a], &[a], "http://127.0.0.1:3001/x", false),
            (&[a, b], &[a], "https://example.com/", false),
            (&[a, b], &[a, b], "https://EXAMPLE.com/search?q=1", true),
            (&[b], &[b], "http://example.com/", false), // port 80, not 443
            (&[a], &[a], "ftp://127.0.0.1:3000/", false),
            (&[a], &[a], "http://user@127.0.0.1:3000/", false),
        ];
        for (declared, granted, url, allowed) in table {
            let g = CapabilityGranter::new(
                declared.iter().map(|s| hp(s)).collect(),
                granted.iter().map(|s| hp(s)).collect(),
            );
            assert_eq!(
                g.check_url(url).is_ok(),
                *allowed,
                "declared={declared:?} granted={granted:?} url={url}"
            );
        }
    }

    #[test]
    fn denial_names_the_missing_side() {
        let g = CapabilityGranter::new(vec![hp("h:1")], vec![]);
        let e = g.check_url("http://h:1/").unwrap_err();
        assert!(e.to_string().contains("--allow-host h:1"), "{e}");
        let g = CapabilityGranter::new(vec![], vec![hp("h:1")]);
        let e = g.check_url("http://h:1/").unwrap_err();
        assert!(e.to_string().contains("not declared"), "{e}");
    }

    #[test]
    fn url_targets() {
        assert_eq!(HostPort::of_url("http://a.b/c").unwrap(), hp("a.b:80"));
        assert_eq!(HostPort::of_url("https://a.b").unwrap(), hp("a.b:443"));
        assert_eq!(
            HostPort::of_url("http://[::1]:8080/").unwrap(),
            hp("[::1]:8080")
        );
        assert!(HostPort::of_url("file:///etc/passwd").is_err());
        assert!(HostPort::of_url("http:///x").is_err());
        assert_eq!(
            HostPort::parse("nohost"),
            Err(HostPortError::NotHostPort {
                input: "nohost".into()
            })
        );
        assert_eq!(
            HostPort::parse("h:99999").unwrap_err().to_string(),
            "`h:99999` has an invalid port `99999`"
        );
        assert!(matches!(
            HostPort::parse("[::1]8080"),
            Err(HostPortError::NotIpv6HostPort { .. })
        ));
        assert!(matches!(
            HostPort::parse("a@b:80"),
            Err(HostPortError::Host { .. })
        ));
    }

    #[test]
    fn gate_counts_denials_and_needs_a_transport() {
        let denied = Arc::new(AtomicU64::new(0));
        let gate = HttpGate {
            granter: CapabilityGranter::new(vec![hp("h:1")], vec![hp("h:1")]),
            transport: None,
            denied: denied.clone(),
            max_body_bytes: 1024,
        };
        let req = |url: &str| HttpRequest {
            method: "GET".into(),
            url: url.into(),
            headers: vec![],
            body: vec![],
        };
        assert!(matches!(
            gate.fetch(req("http://h:1/")),
            Err(HttpError::Transport(_))
        ));
        assert!(matches!(
            gate.fetch(req("http://h:2/")),
            Err(HttpError::Denied(_))
        ));
        assert!(matches!(
            gate.fetch(req("http://other:1/")),
            Err(HttpError::Denied(_))
        ));
        assert_eq!(denied.load(Ordering::Relaxed), 2);
    }
}
