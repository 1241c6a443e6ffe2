//! The plugin manifest: JSON embedded by the SDK in the component's custom section
//! [`MANIFEST_SECTION`], read by the host without running plugin code (`ragen-gym inspect`).
//! The semver check of its `interface_version` is in [`crate::version`].

use serde::{Deserialize, Serialize};

pub use ragen_gym_sdk::MANIFEST_SECTION;

pub use ragen_gym_sdk::manifest::MAX_ID_BYTES;

/// `Ok` when the host accepts `id` as a plugin id (`namespace/Name-vN`; the rule is
/// [`ragen_gym_sdk::manifest::id_problem`], the same code the SDK's export macros run at
/// compile time), else the reason, naming the id.
pub fn check_id(id: &str) -> Result<(), String> {
    match ragen_gym_sdk::manifest::id_problem(id) {
        None => Ok(()),
        Some(why) => Err(format!("{id:?} is not `namespace/Name-vN`: {why}")),
    }
}

/// What a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// Exports `ragen:gym/environment` (world `env-plugin`).
    Environment,
    /// Exports `ragen:gym/reward-function` (world `reward-plugin`).
    RewardFunction,
}

impl PluginKind {
    /// The interface a plugin of this kind must export (without version).
    pub fn export(self) -> &'static str {
        match self {
            Self::Environment => "ragen:gym/environment",
            Self::RewardFunction => "ragen:gym/reward-function",
        }
    }
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

/// Per-call limits the plugin asks for; the host takes the lower of these and its own.
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

/// The manifest a plugin embeds ([`MANIFEST_SECTION`] custom section, JSON).
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
    /// Requested limits.
    #[serde(default)]
    pub limits: ManifestLimits,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_form_and_rejects_unknown_keys() {
        let m: Manifest = serde_json::from_str(
            r#"{"id":"ragen/Sokoban-v0","version":"0.1.0","interface_version":"0.1.0",
                "kind":"environment","capabilities":{"http":["127.0.0.1:3000"]},
                "limits":{"fuel_per_call":1000}}"#,
        )
        .unwrap();
        assert_eq!(m.kind, PluginKind::Environment);
        assert_eq!(m.capabilities.http, ["127.0.0.1:3000"]);
        assert!(!m.capabilities.clock && !m.capabilities.random);
        assert_eq!(m.limits.fuel_per_call, Some(1000));
        assert_eq!(m.limits.memory_bytes, None);
        let unknown = serde_json::from_str::<Manifest>(
            r#"{"id":"a/B-v0","version":"0.1.0","interface_version":"0.1.0",
                "kind":"reward-function","colour":"red"}"#,
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("colour"), "{unknown}");
    }
}

#[cfg(test)]
mod id_tests {
    use super::check_id;

    #[test]
    fn ids_have_a_namespace_a_name_and_gymnasium_characters() {
        for good in [
            "ragen/Sokoban-v0",
            "me/Guess-v0",
            "a/B",
            "ns.x:y/Name_2-v10",
        ] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        let long = format!("a/{}", "b".repeat(127));
        for bad in [
            "", "/", "noslash", "/x", "x/", "a/b c", "a/b/c", "a/b\n", "a/b?", "ü/B", &long,
        ] {
            let e = check_id(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(check_id(&long[..128]).is_ok());
    }
}
