//! The sandbox flags shared by every subcommand that runs a plugin: capability grants
//! (`--allow-host`, `--allow-clock`, `--allow-random`), limits (`--fuel`, `--memory-mib`) and
//! the plugin sources ([`SourceArgs`]); what each limit means is in `docs/architecture.md`
//! section 5.

use super::source::SourceArgs;
use anyhow::Context;
use ragen_gym_sandbox::{Grants, HostPort, ReqwestTransport, Sandbox, SandboxConfig};
use std::sync::Arc;

/// Sandbox limits and capability grants.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SandboxArgs {
    /// Grant the plugin HTTP access to HOST:PORT (repeatable). Used only if the plugin's manifest
    /// declares the same target.
    #[arg(long = "allow-host", value_name = "HOST:PORT")]
    pub allow_host: Vec<String>,
    /// Grant the real wall and monotonic clocks (used only if the plugin's manifest declares
    /// `capabilities.clock`; otherwise the plugin runs on the virtual clock).
    #[arg(long = "allow-clock")]
    pub allow_clock: bool,
    /// Grant real randomness (used only if the manifest declares `capabilities.random`;
    /// otherwise WASI randomness is derived from the reset seed).
    #[arg(long = "allow-random")]
    pub allow_random: bool,
    /// Fuel units per plugin call (default 2e9; about 100 M units per 10 ms of guest work), or
    /// `off` to run without fuel (only the wall-clock deadline then stops a runaway call).
    /// A budget of 0 is refused.
    #[arg(long, value_name = "UNITS|off", value_parser = parse_fuel)]
    pub fuel: Option<Fuel>,
    /// Linear-memory cap per plugin instance, MiB (default 256; 1 to 4096, the most a 32-bit
    /// Wasm memory can address).
    #[arg(long = "memory-mib", value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub memory_mib: Option<u64>,
    /// Where plugins may come from.
    #[command(flatten)]
    pub source: SourceArgs,
}

/// `--fuel`: a per-call budget of at least one unit, or no fuel metering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fuel {
    /// This many units per call.
    Units(u64),
    /// Run without fuel.
    Off,
}

fn parse_fuel(s: &str) -> Result<Fuel, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Fuel::Off);
    }
    match s.parse::<u64>() {
        Ok(0) => {
            Err("0 is a budget no call can run in; use `--fuel off` to run without fuel".into())
        }
        Ok(n) => Ok(Fuel::Units(n)),
        Err(e) => Err(format!("expected a number of fuel units or `off`: {e}")),
    }
}

impl SandboxArgs {
    /// The sandbox configuration these flags select, with room for at least `live_instances`
    /// plugin instances at once (never fewer than the sandbox's default).
    pub fn config(&self, live_instances: usize) -> SandboxConfig {
        let mut cfg = SandboxConfig::default();
        match self.fuel {
            Some(Fuel::Units(f)) => cfg.fuel_per_call = f,
            Some(Fuel::Off) => cfg.fuel = false,
            None => {}
        }
        if let Some(m) = self.memory_mib {
            cfg.memory_bytes = m << 20;
        }
        let live = u32::try_from(live_instances).unwrap_or(u32::MAX);
        cfg.max_instances = cfg.max_instances.max(live);
        cfg
    }

    /// A sandbox with these limits and room for `live_instances` plugin instances (0: the
    /// default). When the user granted any host (`--allow-host`), it gets the reqwest HTTP
    /// transport; without grants no transport exists at all, so even a gate bug could not open
    /// a connection.
    ///
    /// # Errors
    /// The engine or the HTTP client cannot be set up.
    pub fn sandbox(&self, live_instances: usize) -> anyhow::Result<Sandbox> {
        let mut builder = Sandbox::builder().config(self.config(live_instances));
        if !self.allow_host.is_empty() {
            let transport =
                ReqwestTransport::with_defaults().context("failed to set up the HTTP transport")?;
            builder = builder.http_transport(Arc::new(transport));
        }
        builder.build().context("failed to set up the sandbox")
    }

    /// The user's grants.
    pub fn grants(&self) -> anyhow::Result<Grants> {
        let http = self
            .allow_host
            .iter()
            .map(|s| HostPort::parse(s).map_err(|e| anyhow::anyhow!("--allow-host: {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Grants {
            http,
            clock: self.allow_clock,
            random: self.allow_random,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuel_is_a_positive_budget_or_off() {
        assert_eq!(parse_fuel("1"), Ok(Fuel::Units(1)));
        assert_eq!(parse_fuel("off"), Ok(Fuel::Off));
        assert!(parse_fuel("0").unwrap_err().contains("--fuel off"));
        assert!(parse_fuel("-1").is_err());
        let args = |fuel| SandboxArgs {
            fuel: Some(fuel),
            ..SandboxArgs::default()
        };
        let on = args(Fuel::Units(7)).config(0);
        assert!(on.fuel && on.fuel_per_call == 7);
        assert!(!args(Fuel::Off).config(0).fuel);
    }

    #[test]
    fn the_instance_pool_grows_to_the_run_and_never_shrinks() {
        let default = SandboxConfig::default().max_instances;
        let args = SandboxArgs::default();
        assert_eq!(args.config(0).max_instances, default);
        assert_eq!(args.config(1).max_instances, default);
        let big = default as usize + 100;
        assert_eq!(args.config(big).max_instances as usize, big);
    }

    #[test]
    fn clock_and_random_are_granted_only_when_asked() {
        let none = SandboxArgs::default().grants().unwrap();
        assert!(!none.clock && !none.random);
        let both = SandboxArgs {
            allow_clock: true,
            allow_random: true,
            ..SandboxArgs::default()
        }
        .grants()
        .unwrap();
        assert!(both.clock && both.random);
    }
}
