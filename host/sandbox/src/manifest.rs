//! The plugin manifest: JSON embedded by the SDK in the component's `ragen:plugin` custom
//! section (see `ragen_gym_sdk::manifest`), read without running plugin code.

use serde::{Deserialize, Serialize};

/// Range of `ragen:gym` interface versions this host accepts (semver-compatible with 0.1.0:
/// before 1.0 a minor bump is breaking, so `^0.1.0` = `>=0.1.0, <0.2.0`).
pub const SUPPORTED_INTERFACE: &str = "^0.1.0";

/// The host's own interface version (the WIT package it was built from).
pub const HOST_INTERFACE_VERSION: &str = "0.1.0";

/// What a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// Exports `ragen:gym/environment` (world `env-plugin`).
    Environment,
    /// Exports `ragen:gym/reward-function` (world `reward-plugin`).
    RewardFunction,
}

/// Capabilities a plugin asks for. Each must also be granted by the user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// `HOST:PORT` targets the plugin may call through `ragen:gym/http`.
    #[serde(default)]
    pub http: Vec<String>,
    /// Real wall/monotonic clocks instead of the deterministic ones.
    #[serde(default)]
    pub clock: bool,
    /// Real randomness instead of randomness derived from the reset seed.
    #[serde(default)]
    pub random: bool,
}

/// Per-call limits the plugin suggests; the host clamps them to its own maxima.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestLimits {
    /// Fuel units per call.
    #[serde(default)]
    pub fuel_per_call: Option<u64>,
    /// Linear memory cap in bytes.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

/// The manifest a plugin embeds (`ragen:plugin` custom section, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Gymnasium-style id `namespace/Name-vN`.
    pub id: String,
    /// The plugin's own semver version.
    pub version: String,
    /// The `ragen:gym` WIT version the plugin was built against.
    pub interface_version: String,
    /// Environment or reward function.
    pub kind: PluginKind,
    /// One sentence for people.
    #[serde(default)]
    pub description: String,
    /// Requested capabilities.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Suggested limits.
    #[serde(default)]
    pub limits: ManifestLimits,
}
