//! A real [`HttpTransport`]: reqwest's blocking client, plain HTTP only (no TLS backend is
//! compiled in, so `https://` targets fail with a transport error), no proxy, a per-request
//! timeout, a response-size cap, redirects followed only within the same scheme, host and port
//! (at most 5), and no connection pooling (each call opens a fresh connection, so a server that
//! went away is seen at once as a refused connection instead of a stale keep-alive socket).
//!
//! The capability gate ([`crate::http`]) runs before this transport on every call.

use std::io::Read;
use std::time::Duration;

use crate::http::{HttpError, HttpRequest, HttpResponse, HttpTransport};
use crate::limits::{HTTP_MAX_BODY_BYTES, HTTP_MAX_REDIRECTS, HTTP_TIMEOUT};

/// [`HttpTransport`] over `reqwest::blocking`.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::blocking::Client,
    max_body_bytes: usize,
}

impl ReqwestTransport {
    /// A transport with a per-request `timeout` and a response-body cap of `max_body_bytes`.
    ///
    /// # Errors
    /// [`HttpError::Transport`] when the client cannot be built.
    pub fn new(timeout: Duration, max_body_bytes: usize) -> Result<Self, HttpError> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt.previous().first().is_some_and(|first| {
                let next = attempt.url();
                first.scheme() == next.scheme()
                    && first.host_str() == next.host_str()
                    && first.port_or_known_default() == next.port_or_known_default()
            });
            if same_origin && attempt.previous().len() <= HTTP_MAX_REDIRECTS {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let client = reqwest::blocking::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(redirects)
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| {
                HttpError::Transport(format!("could not build the http client: {}", chain(&e)))
            })?;
        Ok(Self {
            client,
            max_body_bytes,
        })
    }

    /// A transport with [`HTTP_TIMEOUT`] and [`HTTP_MAX_BODY_BYTES`].
    ///
    /// # Errors
    /// As [`ReqwestTransport::new`].
    pub fn with_defaults() -> Result<Self, HttpError> {
        Self::new(HTTP_TIMEOUT, HTTP_MAX_BODY_BYTES)
    }
}

/// The error and its sources, `: `-joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn map_error(e: &reqwest::Error) -> HttpError {
    if e.is_timeout() {
        HttpError::Timeout
    } else if e.is_builder() {
        HttpError::InvalidRequest(chain(e))
    } else {
        HttpError::Transport(chain(e))
    }
}

impl HttpTransport for ReqwestTransport {
    fn fetch(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let method = match req.method.to_ascii_uppercase().as_str() {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            other => {
                return Err(HttpError::InvalidRequest(format!(
                    "method `{other}` is not allowed (GET or POST)"
                )));
            }
        };
        let url = reqwest::Url::parse(&req.url)
            .map_err(|e| HttpError::InvalidRequest(format!("bad URL: {e}")))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(HttpError::InvalidRequest(format!(
                "scheme `{}` is not allowed",
                url.scheme()
            )));
        }
        let mut builder = self.client.request(method, url);
        for (name, value) in &req.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpError::InvalidRequest(format!("bad header name {name:?}")))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| HttpError::InvalidRequest(format!("bad value for header {name}")))?;
            builder = builder.header(name, value);
        }
        if !req.body.is_empty() {
            builder = builder.body(req.body);
        }
        let response = builder.send().map_err(|e| map_error(&e))?;
        if response
            .content_length()
            .is_some_and(|n| n > self.max_body_bytes as u64)
        {
            return Err(HttpError::TooLarge);
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        response
            .take(self.max_body_bytes as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    HttpError::Timeout
                } else {
                    HttpError::Transport(chain(&e))
                }
            })?;
        if body.len() > self.max_body_bytes {
            return Err(HttpError::TooLarge);
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{SocketAddr, TcpListener};

    use super::*;

    /// Serve `replies` (raw HTTP responses, one per connection) on an ephemeral loopback port.
    fn serve(replies: Vec<String>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for reply in replies {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        addr
    }

    fn ok(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn get(url: String) -> HttpRequest {
        HttpRequest {
            method: "GET".into(),
            url,
            headers: vec![("accept".into(), "application/json".into())],
            body: vec![],
        }
    }

    #[test]
    fn fetches_status_headers_and_body() {
        let addr = serve(vec![ok("\"ok\"")]);
        let t = ReqwestTransport::with_defaults().unwrap();
        let r = t.fetch(get(format!("http://{addr}/"))).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"\"ok\"");
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| k == "content-length" && v == "4")
        );
    }

    #[test]
    fn caps_the_response_size() {
        let big = "x".repeat(2048);
        let addr = serve(vec![ok(&big), ok(&big)]);
        let t = ReqwestTransport::new(HTTP_TIMEOUT, 1024).unwrap();
        assert_eq!(
            t.fetch(get(format!("http://{addr}/"))),
            Err(HttpError::TooLarge)
        );
        let t = ReqwestTransport::new(HTTP_TIMEOUT, 4096).unwrap();
        assert_eq!(
            t.fetch(get(format!("http://{addr}/"))).unwrap().body.len(),
            2048
        );
    }

    #[test]
    fn does_not_follow_redirects_to_other_hosts() {
        let other = serve(vec![ok("other")]);
        let redirect = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://{other}/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let addr = serve(vec![redirect]);
        let t = ReqwestTransport::with_defaults().unwrap();
        let r = t.fetch(get(format!("http://{addr}/"))).unwrap();
        assert_eq!(r.status, 302, "the redirect is returned, not followed");
    }

    #[test]
    fn follows_same_origin_redirects() {
        let listener_addr = serve(vec![
            "HTTP/1.1 302 Found\r\nLocation: /there\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            ok("there"),
        ]);
        let t = ReqwestTransport::with_defaults().unwrap();
        let r = t.fetch(get(format!("http://{listener_addr}/"))).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"there"[..]));
    }

    #[test]
    fn refused_connections_and_timeouts_are_typed() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let t = ReqwestTransport::new(Duration::from_millis(300), 1024).unwrap();
        assert!(matches!(
            t.fetch(get(format!("http://{closed}/"))),
            Err(HttpError::Transport(_))
        ));
        // Accepts but never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        assert_eq!(
            t.fetch(get(format!("http://{addr}/"))),
            Err(HttpError::Timeout)
        );
        drop(silent);
        let bad = HttpRequest {
            method: "DELETE".into(),
            ..get(format!("http://{addr}/"))
        };
        assert!(matches!(t.fetch(bad), Err(HttpError::InvalidRequest(_))));
    }
}
