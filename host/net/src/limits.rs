//! [`Limits`]: what bounds one network read. Every read is bounded three ways: the bytes
//! actually received (not the size a server announces), an overall deadline from the first
//! connection attempt to the last byte, and a minimum rate once the response has started
//! (curl's `--max-filesize`, `--max-time` and `--speed-limit`/`--speed-time`, `curl(1)`).

use std::fmt;
use std::time::Duration;

/// The slowest a response may arrive: at least `bytes_per_sec` on average over every window of
/// `window` (curl's `--speed-limit` over `--speed-time`). A server that trickles or stalls fails
/// at the end of the first window below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    /// Bytes per second, averaged over `window`.
    pub bytes_per_sec: u64,
    /// The averaging window.
    pub window: Duration,
}

impl MinRate {
    /// Bytes a full window must bring.
    pub fn bytes_per_window(&self) -> u64 {
        let ms = u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX);
        self.bytes_per_sec.saturating_mul(ms) / 1000
    }
}

impl fmt::Display for MinRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes/s over {}",
            self.bytes_per_sec,
            Seconds(self.window)
        )
    }
}

/// The bounds of one network read (a download, or an API request with its retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most body bytes received; one more fails the read.
    pub max_bytes: u64,
    /// From the first connection attempt until the body's last byte, redirects and retries
    /// included.
    pub deadline: Duration,
    /// The slowest a body may arrive once its headers are in; `None`: no floor.
    pub min_rate: Option<MinRate>,
    /// Longest wait for a response's headers, per request.
    pub head_timeout: Duration,
    /// Longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
}

impl Limits {
    /// Plugin downloads: 256 MiB, 10 minutes, at least 1 KiB/s over 30 s, headers within 30 s.
    pub const DOWNLOAD: Limits = Limits {
        max_bytes: 256 << 20,
        deadline: Duration::from_secs(600),
        min_rate: Some(MinRate {
            bytes_per_sec: 1024,
            window: Duration::from_secs(30),
        }),
        head_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
    };

    /// API responses (one chat completion): 8 MiB, 10 minutes for a request and its retries,
    /// at least 1 KiB/s over 30 s once the answer starts; a model may think for minutes before
    /// its headers, so they may take as long as one attempt (10 minutes).
    pub const API: Limits = Limits {
        max_bytes: 8 << 20,
        deadline: Duration::from_secs(600),
        min_rate: Some(MinRate {
            bytes_per_sec: 1024,
            window: Duration::from_secs(30),
        }),
        head_timeout: Duration::from_secs(600),
        connect_timeout: Duration::from_secs(10),
    };

    /// These limits with another byte cap.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

/// A duration as seconds, `30 s` or `0.5 s`.
#[derive(Debug, Clone, Copy)]
pub struct Seconds(pub Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        if s.fract() == 0.0 {
            write!(f, "{s:.0} s")
        } else {
            write!(f, "{s} s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_names_its_window_and_counts_a_window_of_bytes() {
        let r = MinRate {
            bytes_per_sec: 1024,
            window: Duration::from_millis(1500),
        };
        assert_eq!(r.bytes_per_window(), 1536);
        assert_eq!(r.to_string(), "1024 bytes/s over 1.5 s");
        assert_eq!(Seconds(Duration::from_secs(600)).to_string(), "600 s");
    }
}
