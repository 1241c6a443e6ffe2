//! [`Grants`]: what the user grants one plugin. A capability is usable only when the plugin's
//! manifest declares it too (`docs/architecture.md`, "Sandbox rules").

use crate::http::HostPort;

/// What the user grants one plugin.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `HOST:PORT` targets for `ragen:gym/http` (`--allow-host`).
    pub http: Vec<HostPort>,
    /// Real clocks (otherwise deterministic).
    pub clock: bool,
    /// Real randomness (otherwise derived from the reset seed).
    pub random: bool,
}
