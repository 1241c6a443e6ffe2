//! [`Client`]: the one HTTP client every network read goes through. It checks the
//! [`Grants`] before a request and on every redirect hop (reqwest's `redirect::Policy::custom`),
//! waits for response headers at most [`Limits::head_timeout`], and hands out a [`Response`]
//! whose body is read under the byte cap, the overall deadline and the minimum rate
//! (`crate::body`).

use crate::error::{NetError, chain};
use crate::grants::{Grants, NotGranted};
use crate::limits::Limits;
use crate::redact::redact_url;
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, Url};
use std::sync::Arc;
use tokio::time::Instant;

/// Redirect hops followed at most (reqwest's default).
pub const MAX_REDIRECTS: usize = 10;

/// A client bound by [`Grants`] and [`Limits`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    grants: Arc<Grants>,
    limits: Limits,
}

/// A response whose headers are in; its body is read with [`Response::bytes`] or
/// [`Response::snippet`] under the limits of the request.
#[derive(Debug)]
pub struct Response {
    pub(crate) inner: reqwest::Response,
    pub(crate) url: String,
    pub(crate) deadline: Instant,
    pub(crate) limits: Limits,
}

impl Client {
    /// A client that contacts only what `grants` allow, within `limits`.
    ///
    /// # Errors
    /// [`NetError::Setup`] when reqwest cannot build its client (TLS backend).
    pub fn new(grants: Grants, limits: Limits) -> Result<Self, NetError> {
        let grants = Arc::new(grants);
        let policy_grants = grants.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(TooManyRedirects);
            }
            match policy_grants.check(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refused) => attempt.error(refused),
            }
        });
        let http = reqwest::Client::builder()
            .connect_timeout(limits.connect_timeout)
            .redirect(redirects)
            .user_agent(concat!("ragen-gym/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| NetError::Setup { reason: chain(&e) })?;
        Ok(Self {
            http,
            grants,
            limits,
        })
    }

    /// The limits of this client's reads.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The hosts this client may contact.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The instant a read started now must be done by.
    pub fn deadline_from_now(&self) -> Instant {
        Instant::now() + self.limits.deadline
    }

    /// A request to `url`, refused here if the grants do not allow it.
    ///
    /// # Errors
    /// [`NetError::NotGranted`].
    pub fn request(&self, method: Method, url: &Url) -> Result<RequestBuilder, NetError> {
        self.grants.check(url)?;
        Ok(self.http.request(method, url.clone()))
    }

    /// Send `request` (to `url`, made by [`Client::request`]) and wait for its headers, at most
    /// [`Limits::head_timeout`] and never past `deadline`.
    ///
    /// # Errors
    /// A refused redirect hop, too many redirects, no response, or a bound hit.
    pub async fn send(
        &self,
        request: RequestBuilder,
        url: &Url,
        deadline: Instant,
    ) -> Result<Response, NetError> {
        let shown = redact_url(url);
        let head_by = deadline.min(Instant::now() + self.limits.head_timeout);
        let sent = tokio::time::timeout_at(head_by, request.send()).await;
        let inner = match sent {
            Err(_) if Instant::now() >= deadline => {
                return Err(NetError::Deadline {
                    url: shown,
                    deadline: self.limits.deadline,
                    received: 0,
                });
            }
            Err(_) => {
                return Err(NetError::HeadTimeout {
                    url: shown,
                    timeout: self.limits.head_timeout,
                });
            }
            Ok(Err(e)) => return Err(send_error(shown, e)),
            Ok(Ok(r)) => r,
        };
        Ok(Response {
            inner,
            url: shown,
            deadline,
            limits: self.limits,
        })
    }

    /// GET `url` with `headers` and read its body whole (a non-2xx status is returned with its
    /// body cut to 64 KiB, for the caller's message).
    ///
    /// # Errors
    /// As [`Client::send`] and [`Response::bytes`].
    pub async fn get(&self, url: &Url, headers: HeaderMap) -> Result<(u16, Vec<u8>), NetError> {
        let deadline = self.deadline_from_now();
        let req = self.request(Method::GET, url)?.headers(headers);
        let resp = self.send(req, url, deadline).await?;
        let status = resp.status();
        if !(200..300).contains(&status) {
            return Ok((status, resp.snippet(64 << 10).await.into_bytes()));
        }
        let cap = self.limits.max_bytes;
        Ok((status, resp.bytes(cap).await?))
    }
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.inner.status().as_u16()
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        self.inner.headers()
    }

    /// The URL requested (credentials redacted), for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The announced body length, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.inner.content_length()
    }
}

/// reqwest's error, classified: a hop the grants refused, too many redirects, or no response.
fn send_error(url: String, e: reqwest::Error) -> NetError {
    let e = e.without_url();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(hop) = s.downcast_ref::<NotGranted>() {
            return NetError::RedirectRefused {
                url,
                hop: hop.clone(),
            };
        }
        if s.downcast_ref::<TooManyRedirects>().is_some() {
            return NetError::TooManyRedirects {
                url,
                max: MAX_REDIRECTS,
            };
        }
        source = s.source();
    }
    NetError::Unreachable {
        url,
        reason: chain(&e),
    }
}

#[derive(Debug)]
struct TooManyRedirects;

impl std::fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "more than {MAX_REDIRECTS} redirects")
    }
}

impl std::error::Error for TooManyRedirects {}
