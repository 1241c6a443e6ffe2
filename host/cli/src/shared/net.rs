//! The bounds on every network read of a command (`--max-time`, `--speed-limit`/`--speed-time`,
//! `--max-plugin-bytes`; curl's names for the first three, `curl(1)`): plugin downloads, registry
//! requests and API calls all go through `ragen_gym_net::Client` with these limits.

use ragen_gym_net::{Limits, MinRate};
use std::time::Duration;

/// Bounds on network reads.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NetArgs {
    /// Most seconds one download, or one API request with all its retries, may take
    /// (default 600).
    #[arg(long = "max-time", value_name = "SECONDS", value_parser = parse_seconds)]
    pub max_time: Option<Duration>,
    /// Slowest accepted transfer, bytes per second averaged over `--speed-time`; a slower or
    /// stalled response fails (default 1024; 0 turns the floor off).
    #[arg(long = "speed-limit", value_name = "BYTES_PER_SECOND")]
    pub speed_limit: Option<u64>,
    /// The window of `--speed-limit`, seconds (default 30).
    #[arg(long = "speed-time", value_name = "SECONDS", value_parser = parse_seconds)]
    pub speed_time: Option<Duration>,
    /// Largest plugin accepted from a file, a URL or a registry, bytes (default 268435456,
    /// 256 MiB); counted on the bytes received, not on the size a server announces.
    #[arg(long = "max-plugin-bytes", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_plugin_bytes: Option<u64>,
}

/// A positive, finite number of seconds.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|e| format!("expected a number of seconds: {e}"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s} is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|e| e.to_string())
}

impl NetArgs {
    /// `base` with these flags applied (the byte cap stays `base`'s).
    fn apply(&self, base: Limits) -> Limits {
        let mut l = base;
        if let Some(t) = self.max_time {
            l.deadline = t;
        }
        let window = self
            .speed_time
            .or(base.min_rate.map(|r| r.window))
            .unwrap_or(Duration::from_secs(30));
        let rate = self
            .speed_limit
            .or(base.min_rate.map(|r| r.bytes_per_sec))
            .unwrap_or(0);
        l.min_rate = (rate > 0).then_some(MinRate {
            bytes_per_sec: rate,
            window,
        });
        // Downloads wait for headers as long as a window of the rate floor.
        if base.head_timeout == Limits::DOWNLOAD.head_timeout {
            l.head_timeout = window;
        }
        l
    }

    /// The limits of plugin downloads and registry requests (and the local-file size cap).
    pub fn download_limits(&self) -> Limits {
        let l = self.apply(Limits::DOWNLOAD);
        match self.max_plugin_bytes {
            Some(n) => l.with_max_bytes(n),
            None => l,
        }
    }

    /// The limits of API responses of at most `max_response_bytes`.
    pub fn api_limits(&self, max_response_bytes: u64) -> Limits {
        self.apply(Limits::API).with_max_bytes(max_response_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_defaults_and_zero_turns_the_rate_floor_off() {
        assert_eq!(NetArgs::default().download_limits(), Limits::DOWNLOAD);
        assert_eq!(NetArgs::default().api_limits(8 << 20), Limits::API);
        let a = NetArgs {
            max_time: Some(Duration::from_millis(1500)),
            speed_limit: Some(10),
            speed_time: Some(Duration::from_secs(2)),
            max_plugin_bytes: Some(1000),
        };
        let l = a.download_limits();
        assert_eq!(l.deadline, Duration::from_millis(1500));
        assert_eq!(
            l.min_rate,
            Some(MinRate {
                bytes_per_sec: 10,
                window: Duration::from_secs(2)
            })
        );
        assert_eq!(
            (l.max_bytes, l.head_timeout),
            (1000, Duration::from_secs(2))
        );
        let api = a.api_limits(77);
        assert_eq!(
            (api.max_bytes, api.head_timeout),
            (77, Limits::API.head_timeout)
        );
        let off = NetArgs {
            speed_limit: Some(0),
            ..NetArgs::default()
        };
        assert_eq!(off.download_limits().min_rate, None);
        assert!(parse_seconds("0").is_err() && parse_seconds("inf").is_err());
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
    }
}
