//! [`Grants`]: which hosts a client may contact, checked before every request and again on
//! every redirect hop (`crate::Client` installs it as reqwest's redirect policy). HTTPS is
//! allowed to any host unless the grants name the only hosts; plain HTTP only to a `HOST:PORT`
//! the user granted.

use crate::redact::redact_url;
use reqwest::Url;

/// A request the grants refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url} is refused: {reason}")]
pub struct NotGranted {
    /// The URL (credentials redacted).
    pub url: String,
    /// Its `HOST:PORT`.
    pub host: String,
    /// Why, with the flag that would grant it.
    pub reason: String,
}

/// The hosts a client may contact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// `HOST:PORT`s reachable over plain HTTP, and the hosts [`Grants::explicitly_granted`]
    /// accepts.
    pub plain_http: Vec<String>,
    /// When set, the only `HOST:PORT`s reachable at all, over either scheme.
    pub only: Option<Vec<String>>,
    /// The flag that grants a host, named in refusals (e.g. `--insecure-registry`).
    pub flag: String,
}

/// `host:port` of a URL, the host lowercased and the scheme's default port filled in.
pub fn host_port(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or("").to_ascii_lowercase(),
        url.port_or_known_default().unwrap_or(0)
    )
}

impl Grants {
    /// HTTPS anywhere, plain HTTP to `plain_http` (granted with `flag`).
    pub fn https_or(plain_http: Vec<String>, flag: impl Into<String>) -> Self {
        Self {
            plain_http: plain_http
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            only: None,
            flag: flag.into(),
        }
    }

    /// Only the origin of `url` (its scheme decides whether plain HTTP is allowed).
    pub fn only_origin_of(url: &Url, flag: impl Into<String>) -> Self {
        let hp = host_port(url);
        Self {
            plain_http: if url.scheme() == "http" {
                vec![hp.clone()]
            } else {
                Vec::new()
            },
            only: Some(vec![hp]),
            flag: flag.into(),
        }
    }

    /// Whether the user named `url`'s host among the granted hosts (an OCI manifest's
    /// foreign-layer URLs must point there).
    pub fn explicitly_granted(&self, url: &Url) -> bool {
        let hp = host_port(url);
        self.plain_http.contains(&hp) || self.only.as_ref().is_some_and(|o| o.contains(&hp))
    }

    /// Refuse `url` unless it is `http(s)://` to a host these grants allow.
    ///
    /// # Errors
    /// [`NotGranted`] naming the URL, its host and the flag that would grant it.
    pub fn check(&self, url: &Url) -> Result<(), NotGranted> {
        let host = host_port(url);
        let refuse = |reason: String| NotGranted {
            url: redact_url(url),
            host: host.clone(),
            reason,
        };
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(refuse(format!(
                "scheme `{}` is not http or https",
                url.scheme()
            )));
        }
        if let Some(only) = &self.only
            && !only.contains(&host)
        {
            return Err(refuse(format!(
                "{host} is not a granted host (granted: {})",
                only.join(", ")
            )));
        }
        if url.scheme() == "http" && !self.plain_http.contains(&host) {
            return Err(refuse(format!(
                "plain HTTP to {host}, which is not granted ({} {host})",
                self.flag
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn plain_http_needs_a_grant_and_https_goes_anywhere() {
        let g = Grants::https_or(vec!["127.0.0.1:5000".into()], "--insecure-registry");
        assert!(g.check(&url("http://127.0.0.1:5000/v2/")).is_ok());
        assert!(g.check(&url("https://ghcr.io/v2/")).is_ok());
        let e = g.check(&url("http://127.0.0.1:5001/x")).unwrap_err();
        assert_eq!(e.host, "127.0.0.1:5001");
        assert_eq!(
            e.to_string(),
            "http://127.0.0.1:5001/x is refused: plain HTTP to 127.0.0.1:5001, which is not granted (--insecure-registry 127.0.0.1:5001)"
        );
        assert!(g.check(&url("ftp://127.0.0.1:5000/x")).is_err());
        assert!(g.explicitly_granted(&url("https://127.0.0.1:5000/blob")));
        assert!(!g.explicitly_granted(&url("https://ghcr.io/blob")));
    }

    #[test]
    fn an_origin_grant_refuses_every_other_host() {
        let g = Grants::only_origin_of(&url("http://127.0.0.1:8000/v1"), "--base-url");
        assert!(
            g.check(&url("http://127.0.0.1:8000/v1/chat/completions"))
                .is_ok()
        );
        assert!(g.check(&url("https://127.0.0.1:8000/x")).is_ok());
        let e = g.check(&url("https://example.org/x")).unwrap_err();
        assert!(e.reason.contains("not a granted host"), "{e}");
        let g = Grants::only_origin_of(&url("https://api.example.org/v1"), "--base-url");
        assert!(g.check(&url("http://api.example.org:443/x")).is_err());
    }
}
