//! Reading a [`Response`] body under its bounds: the bytes actually received are counted
//! against the cap (an announced Content-Length over it is refused before reading), the
//! overall deadline is a timer, not a per-read timeout that a trickle of bytes keeps resetting,
//! and the minimum rate is checked at the end of every window, so a stalled body fails too.

use crate::client::Response;
use crate::error::{NetError, chain};
use tokio::time::Instant;

/// Bytes reserved up front at most, whatever a server announces.
const MAX_RESERVE: u64 = 1 << 20;

impl Response {
    /// The whole body, at most `max_bytes` (and never more than the client's byte cap).
    ///
    /// # Errors
    /// [`NetError::TooLarge`], [`NetError::Deadline`], [`NetError::TooSlow`], or
    /// [`NetError::Truncated`] for a body that ends early or breaks off.
    pub async fn bytes(mut self, max_bytes: u64) -> Result<Vec<u8>, NetError> {
        let cap = max_bytes.min(self.limits.max_bytes);
        let announced = self.inner.content_length();
        if let Some(n) = announced.filter(|n| *n > cap) {
            return Err(NetError::TooLarge {
                url: self.url,
                max_bytes: cap,
                announced: Some(n),
            });
        }
        let reserve = announced.unwrap_or(0).min(MAX_RESERVE);
        let mut body = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
        let mut window = Window::start(Instant::now());
        loop {
            let wake = self.limits.min_rate.map_or(self.deadline, |r| {
                self.deadline.min(window.started + r.window)
            });
            match tokio::time::timeout_at(wake, self.inner.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let received = body.len() as u64 + chunk.len() as u64;
                    if received > cap {
                        return Err(NetError::TooLarge {
                            url: self.url,
                            max_bytes: cap,
                            announced: None,
                        });
                    }
                    body.extend_from_slice(&chunk);
                    window.bytes += chunk.len() as u64;
                }
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    tracing::debug!(url = %self.url, "body error: {}", chain(&e.without_url()));
                    return Err(NetError::Truncated {
                        url: self.url,
                        expected: announced,
                        received: body.len() as u64,
                    });
                }
                Err(_timer) => {}
            }
            self.check_bounds(&mut window, body.len() as u64)?;
        }
        if let Some(n) = announced.filter(|n| *n != body.len() as u64) {
            return Err(NetError::Truncated {
                url: self.url,
                expected: Some(n),
                received: body.len() as u64,
            });
        }
        Ok(body)
    }

    /// At most `max_bytes` of the body as text (lossy UTF-8), for an error message. Never
    /// fails: a body that errs, stalls or runs past the deadline gives what arrived.
    pub async fn snippet(mut self, max_bytes: usize) -> String {
        let mut body: Vec<u8> = Vec::new();
        let mut window = Window::start(Instant::now());
        while body.len() < max_bytes {
            let wake = self.limits.min_rate.map_or(self.deadline, |r| {
                self.deadline.min(window.started + r.window)
            });
            match tokio::time::timeout_at(wake, self.inner.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    let take = chunk.len().min(max_bytes - body.len());
                    body.extend_from_slice(&chunk[..take]);
                    window.bytes += take as u64;
                }
                Ok(Ok(None) | Err(_)) => break,
                Err(_timer) => {}
            }
            if self.check_bounds(&mut window, body.len() as u64).is_err() {
                break;
            }
        }
        String::from_utf8_lossy(&body).into_owned()
    }

    /// Fail past the deadline, or at the end of a window that brought less than the minimum
    /// rate; start the next window otherwise.
    fn check_bounds(&self, window: &mut Window, received: u64) -> Result<(), NetError> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(NetError::Deadline {
                url: self.url.clone(),
                deadline: self.limits.deadline,
                received,
            });
        }
        if let Some(rate) = self.limits.min_rate
            && now >= window.started + rate.window
        {
            if window.bytes < rate.bytes_per_window() {
                return Err(NetError::TooSlow {
                    url: self.url.clone(),
                    rate,
                    in_window: window.bytes,
                    received,
                });
            }
            *window = Window::start(now);
        }
        Ok(())
    }
}

/// Bytes received since `started`.
struct Window {
    started: Instant,
    bytes: u64,
}

impl Window {
    fn start(at: Instant) -> Self {
        Self {
            started: at,
            bytes: 0,
        }
    }
}
