//! [`Session`]: requests to one repository of one OCI registry through the bounded client,
//! authenticated as the registry asks (OCI Distribution Specification v1.1, "Pulling" and
//! "Pushing"; the token flow of the distribution registry,
//! <https://github.com/distribution/distribution/blob/main/docs/spec/auth/token.md>): a `401`
//! with `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered by fetching a token from
//! the realm (with the user's credentials, if any) and retrying; `Basic` by retrying with the
//! credentials. Every request, the token request and each redirect hop included, passes the
//! client's grant check, and every body is read under its limits.
//!
//! oci-client (the OCI crate the rest of this crate uses for references and manifest types)
//! builds its own reqwest client, so it cannot take a redirect policy, and it reads manifests
//! and error bodies whole (`Client::_pull_manifest_raw` calls `Response::bytes`; an open
//! upstream issue, `oras-project/rust-oci-client#206`, asks for a size limit). Requests are
//! therefore made here, on `ragen_gym_net::Client`.

use crate::error::RegistryError;
use ragen_gym_net::header::{self, HeaderMap, HeaderValue};
use ragen_gym_net::{Client, Method, NetError, Response, Url, redact_secret};
use tokio::time::Instant;

/// Registry credentials: `RAGEN_GYM_REGISTRY_USERNAME` and `RAGEN_GYM_REGISTRY_PASSWORD` when
/// both are set, else anonymous.
#[derive(Clone)]
pub(crate) struct Credentials {
    user: String,
    password: String,
}

impl Credentials {
    pub(crate) fn from_env() -> Option<Self> {
        match (
            std::env::var("RAGEN_GYM_REGISTRY_USERNAME"),
            std::env::var("RAGEN_GYM_REGISTRY_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) if !user.is_empty() => Some(Self { user, password }),
            _ => None,
        }
    }
}

/// How requests are authorised once the registry asked.
enum Auth {
    Basic,
    Bearer(String),
}

/// Most bytes read of a token response or an error body.
const SMALL_BODY_BYTES: u64 = 64 << 10;
/// Characters of an error body quoted in a message.
const QUOTED_CHARS: usize = 300;

/// Requests to `repository` on one registry.
pub(crate) struct Session<'a> {
    net: &'a Client,
    /// The reference, for messages.
    pub(crate) reference: String,
    /// `{scheme}://{registry}/v2/{repository}/`.
    pub(crate) base: Url,
    scope: String,
    insecure: bool,
    creds: Option<Credentials>,
    auth: Option<Auth>,
    deadline: Instant,
}

impl<'a> Session<'a> {
    /// A session for `repository` on `registry` (plain HTTP when `insecure`), asking for
    /// `actions` (`pull` or `pull,push`). Its requests share one deadline.
    pub(crate) fn new(
        net: &'a Client,
        reference: &str,
        registry: &str,
        repository: &str,
        insecure: bool,
        actions: &str,
    ) -> Result<Self, RegistryError> {
        let scheme = if insecure { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{registry}/v2/{repository}/")).map_err(|e| {
            RegistryError::Registry {
                reference: reference.to_string(),
                reason: format!("bad registry URL: {e}"),
            }
        })?;
        Ok(Self {
            net,
            reference: reference.to_string(),
            base,
            scope: format!("repository:{repository}:{actions}"),
            insecure,
            creds: Credentials::from_env(),
            auth: None,
            deadline: net.deadline_from_now(),
        })
    }

    /// `{base}{path}`.
    pub(crate) fn url(&self, path: &str) -> Result<Url, RegistryError> {
        self.base.join(path).map_err(|e| RegistryError::Registry {
            reference: self.reference.clone(),
            reason: format!("bad URL {path:?}: {e}"),
        })
    }

    /// A network failure, with a hint when a plain-HTTP registry was spoken to over HTTPS.
    pub(crate) fn net_error(&self, e: NetError) -> RegistryError {
        match e {
            NetError::Unreachable { url, reason } if !self.insecure => {
                RegistryError::Net(NetError::Unreachable {
                    url,
                    reason: format!(
                        "{reason} (a plain-HTTP registry needs --insecure-registry HOST:PORT)"
                    ),
                })
            }
            other => RegistryError::Net(other),
        }
    }

    /// Send `method` to `url` with `headers` (and `body`), authenticating once if the registry
    /// answers 401. The response is returned whatever its status.
    pub(crate) async fn send(
        &mut self,
        method: Method,
        url: &Url,
        headers: &HeaderMap,
        body: Option<&bytes::Bytes>,
    ) -> Result<Response, RegistryError> {
        let mut challenged = false;
        loop {
            let mut req = self
                .net
                .request(method.clone(), url)
                .map_err(|e| self.net_error(e))?
                .headers(headers.clone());
            req = match (&self.auth, &self.creds) {
                (Some(Auth::Bearer(t)), _) => req.bearer_auth(t),
                (Some(Auth::Basic), Some(c)) => req.basic_auth(&c.user, Some(&c.password)),
                _ => req,
            };
            if let Some(b) = body {
                req = req.body(b.clone());
            }
            let resp = self
                .net
                .send(req, url, self.deadline)
                .await
                .map_err(|e| self.net_error(e))?;
            if resp.status() != 401 || challenged {
                return Ok(resp);
            }
            challenged = true;
            let challenge = resp
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            if !self.authorize(&challenge).await? {
                return Ok(resp);
            }
        }
    }

    /// GET `url` without any credentials (a foreign layer URL).
    pub(crate) async fn send_anonymous(&self, url: &Url) -> Result<Response, RegistryError> {
        let req = self
            .net
            .request(Method::GET, url)
            .map_err(|e| self.net_error(e))?;
        self.net
            .send(req, url, self.deadline)
            .await
            .map_err(|e| self.net_error(e))
    }

    /// Answer a `WWW-Authenticate` challenge; `false` when it cannot be answered (no
    /// credentials for `Basic`, an unknown scheme).
    async fn authorize(&mut self, challenge: &str) -> Result<bool, RegistryError> {
        let Some((scheme, params)) = parse_challenge(challenge) else {
            return Ok(false);
        };
        if scheme.eq_ignore_ascii_case("basic") {
            self.auth = Some(Auth::Basic);
            return Ok(self.creds.is_some());
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Ok(false);
        }
        let param = |k: &str| {
            params
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let bad = |reason: String| RegistryError::Registry {
            reference: self.reference.clone(),
            reason,
        };
        let mut realm = Url::parse(param("realm").unwrap_or("")).map_err(|e| {
            bad(format!(
                "the token realm in {challenge:?} is not a URL: {e}"
            ))
        })?;
        {
            let mut q = realm.query_pairs_mut();
            if let Some(s) = param("service") {
                q.append_pair("service", s);
            }
            q.append_pair("scope", param("scope").unwrap_or(&self.scope));
        }
        let mut req = self
            .net
            .request(Method::GET, &realm)
            .map_err(|e| self.net_error(e))?;
        if let Some(c) = &self.creds {
            req = req.basic_auth(&c.user, Some(&c.password));
        }
        let resp = self
            .net
            .send(req, &realm, self.deadline)
            .await
            .map_err(|e| self.net_error(e))?;
        if resp.status() != 200 {
            let status = resp.status();
            let quoted = self.quote(resp).await;
            return Err(bad(format!(
                "the token service answered HTTP {status}: {quoted}"
            )));
        }
        let body = resp
            .bytes(SMALL_BODY_BYTES)
            .await
            .map_err(|e| self.net_error(e))?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let t: Token = serde_json::from_slice(&body)
            .map_err(|e| bad(format!("the token service sent no token: {e}")))?;
        let token = t
            .token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("the token service sent an empty token".into()))?;
        self.auth = Some(Auth::Bearer(token));
        Ok(true)
    }

    /// The start of an error body, credentials redacted.
    pub(crate) async fn quote(&self, resp: Response) -> String {
        let text = resp.snippet(SMALL_BODY_BYTES as usize).await;
        let secret = self.creds.as_ref().map(|c| c.password.as_str());
        redact_secret(text.trim(), secret, QUOTED_CHARS)
    }

    /// A non-success status as an error: 404 is [`RegistryError::NotFound`], the rest
    /// [`RegistryError::Registry`] quoting the body.
    pub(crate) async fn status_error(&self, what: &str, resp: Response) -> RegistryError {
        let status = resp.status();
        let url = resp.url().to_string();
        let quoted = self.quote(resp).await;
        match status {
            404 => RegistryError::NotFound {
                reference: self.reference.clone(),
                reason: format!("HTTP 404 for the {what} ({url}): {quoted}"),
            },
            401 | 403 => RegistryError::Registry {
                reference: self.reference.clone(),
                reason: format!(
                    "HTTP {status} for the {what} ({url}): {quoted} (credentials are read from \
                     RAGEN_GYM_REGISTRY_USERNAME and RAGEN_GYM_REGISTRY_PASSWORD)"
                ),
            },
            _ => RegistryError::Registry {
                reference: self.reference.clone(),
                reason: format!("HTTP {status} for the {what} ({url}): {quoted}"),
            },
        }
    }
}

/// A header value.
pub(crate) fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `Scheme k="v", k2=v2` (RFC 9110 section 11.6.1): the scheme and its parameters.
fn parse_challenge(s: &str) -> Option<(String, Vec<(String, String)>)> {
    let s = s.trim();
    let (scheme, rest) = s.split_once(' ').unwrap_or((s, ""));
    if scheme.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (val, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_once(',').map_or((after, ""), |(v, t)| (v, t))
        };
        params.push((key.trim().to_string(), val.trim().to_string()));
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some((scheme.to_string(), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_and_basic_challenges_parse() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(s, "Bearer");
        assert_eq!(
            p,
            vec![
                ("realm".into(), "https://auth.example/token".into()),
                ("service".into(), "registry.example".into()),
                ("scope".into(), "repository:a/b:pull".into()),
            ]
        );
        let (s, p) = parse_challenge("Basic realm=registry").unwrap();
        assert_eq!((s.as_str(), p.len()), ("Basic", 1));
        assert!(parse_challenge("").is_none());
    }
}
