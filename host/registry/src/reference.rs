//! [`PluginRef`]: how a user names a plugin.
//!
//! - a local path: `plugins/my_env.wasm`;
//! - a URL pinned by digest: `https://host/path/x.wasm#sha256=<hex>` (`http://` only on a host
//!   granted with `ResolveOptions::insecure_hosts`; without the pin only with
//!   `ResolveOptions::allow_unpinned` or a lock file entry);
//! - an OCI artifact: `oci://registry/namespace/name:tag` or `oci://registry/namespace/name@sha256:<hex>`
//!   (the registry must be named: there is no default registry).
//!
//! A reference is stored (in `ragen-gym.lock`, in every line of `trajectories.jsonl`) and printed
//! in its display form, which never carries credentials: a URL's user info (`user:pass@`) is
//! dropped and the values of secret query parameters (`token`, `X-Amz-Signature`, ...) are
//! replaced by `***` (`ragen_gym_net::redact_url`). The download itself uses the URL as given.

use crate::digest::Digest;
use oci_client::Reference;
use ragen_gym_net::{Url, redact_url};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A plugin reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRef {
    /// A component file on this machine.
    Path(PathBuf),
    /// An `http(s)://` URL, without its fragment, and the `#sha256=` pin if it had one.
    Url {
        /// The URL to download, credentials included (never displayed).
        url: Url,
        /// The digest the download must have.
        pin: Option<Digest>,
    },
    /// An OCI artifact (a tag or a manifest digest in a named registry).
    Oci(Reference),
}

/// Why a reference did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid plugin reference `{reference}`: {reason}")]
pub struct InvalidReference {
    /// The reference as given.
    pub reference: String,
    /// What is wrong.
    pub reason: String,
}

impl PluginRef {
    /// `HOST:PORT` of a URL or OCI registry (default ports filled in), `None` for a path.
    pub fn host_port(&self) -> Option<String> {
        match self {
            PluginRef::Path(_) => None,
            PluginRef::Url { url, .. } => Some(format!(
                "{}:{}",
                url.host_str().unwrap_or(""),
                url.port_or_known_default().unwrap_or(0)
            )),
            PluginRef::Oci(r) => {
                let reg = r.registry();
                Some(if reg.contains(':') {
                    reg.to_string()
                } else {
                    format!("{reg}:443")
                })
            }
        }
    }

    /// Whether the reference itself fixes the content: a path (read now), a URL with a pin, an
    /// OCI manifest digest. OCI tags are mutable: the lock file pins them.
    pub fn is_pinned(&self) -> bool {
        match self {
            PluginRef::Path(_) => true,
            PluginRef::Url { pin, .. } => pin.is_some(),
            PluginRef::Oci(r) => r.digest().is_some(),
        }
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginRef::Path(p) => write!(f, "{}", p.display()),
            PluginRef::Url { url, pin: None } => write!(f, "{}", redact_url(url)),
            PluginRef::Url { url, pin: Some(d) } => {
                write!(f, "{}#sha256={}", redact_url(url), d.hex())
            }
            PluginRef::Oci(r) => write!(f, "oci://{}", r.whole()),
        }
    }
}

impl FromStr for PluginRef {
    type Err = InvalidReference;

    fn from_str(s: &str) -> Result<Self, InvalidReference> {
        let invalid = |reason: String| InvalidReference {
            reference: s.to_string(),
            reason,
        };
        if let Some(rest) = s.strip_prefix("oci://") {
            let first = rest.split('/').next().unwrap_or("");
            if !(first.contains('.') || first.contains(':') || first == "localhost")
                || !rest.contains('/')
            {
                return Err(invalid(
                    "name the registry, e.g. `oci://ghcr.io/namespace/name:tag`".into(),
                ));
            }
            // The digest first, so a short one is named as such (the OCI parser's own message
            // only says the reference is invalid).
            if let Some((_, d)) = rest.split_once('@') {
                Digest::parse(d).map_err(|e| invalid(e.to_string()))?;
            }
            let r = Reference::try_from(rest).map_err(|e| invalid(e.to_string()))?;
            return Ok(PluginRef::Oci(r));
        }
        if s.starts_with("https://") || s.starts_with("http://") {
            let mut url = Url::parse(s).map_err(|e| invalid(e.to_string()))?;
            if url.host_str().is_none_or(str::is_empty) {
                return Err(invalid("the URL has no host".into()));
            }
            let pin = match url.fragment() {
                None => None,
                Some(f) => match f.strip_prefix("sha256=") {
                    Some(h) => Some(Digest::parse(h).map_err(|e| invalid(e.to_string()))?),
                    None => {
                        return Err(invalid(format!(
                            "the fragment `#{f}` is not a `#sha256=<hex>` pin"
                        )));
                    }
                },
            };
            url.set_fragment(None);
            return Ok(PluginRef::Url { url, pin });
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(invalid(format!(
                "unsupported scheme `{scheme}` (use a path, https://, http:// or oci://)"
            )));
        }
        if s.is_empty() {
            return Err(invalid("empty".into()));
        }
        Ok(PluginRef::Path(PathBuf::from(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn every_form_parses_and_prints_back() {
        for s in [
            "plugins/x.wasm".to_string(),
            format!("https://example.org/p/x.wasm#sha256={HEX}"),
            "http://127.0.0.1:8000/x.wasm".to_string(),
            "oci://127.0.0.1:5000/ragen/sokoban:0.1.0".to_string(),
            format!("oci://ghcr.io/acme/sokoban@sha256:{HEX}"),
        ] {
            let r: PluginRef = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
        let r: PluginRef = format!("https://example.org/x.wasm#sha256={HEX}")
            .parse()
            .unwrap();
        assert!(r.is_pinned());
        assert_eq!(r.host_port().as_deref(), Some("example.org:443"));
        let r: PluginRef = "oci://localhost:5000/a/b:v1".parse().unwrap();
        assert!(!r.is_pinned(), "a tag is not a pin");
        assert_eq!(r.host_port().as_deref(), Some("localhost:5000"));
        match r {
            PluginRef::Oci(o) => {
                assert_eq!(o.registry(), "localhost:5000");
                assert_eq!(o.repository(), "a/b");
                assert_eq!(o.tag(), Some("v1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn credentials_never_reach_the_display_form() {
        let s = format!("https://alice:s3cret@example.org/x.wasm?token=t0k&v=1#sha256={HEX}");
        let r: PluginRef = s.parse().unwrap();
        assert_eq!(
            r.to_string(),
            format!("https://example.org/x.wasm?token=***&v=1#sha256={HEX}")
        );
        match &r {
            PluginRef::Url { url, .. } => {
                assert_eq!((url.username(), url.password()), ("alice", Some("s3cret")));
                assert_eq!(url.query(), Some("token=t0k&v=1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_references_say_why() {
        let err = |s: &str| s.parse::<PluginRef>().unwrap_err().reason;
        assert!(err("oci://sokoban:0.1.0").contains("name the registry"));
        assert!(err("https://h/x.wasm#md5=00").contains("not a `#sha256=<hex>` pin"));
        assert!(err("https://h/x.wasm#sha256=00").contains("64 hex"));
        assert!(err("ftp://h/x.wasm").contains("unsupported scheme `ftp`"));
        assert!(err("oci://ghcr.io/a/b@sha256:00").contains("64 hex"));
    }
}
