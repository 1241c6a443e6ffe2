//! The FrozenLake env config (JSON, strict).
//!
//! Keys and defaults follow RAGEN's `FrozenLakeEnvConfig` (`size` 4, `p` 0.8, `is_slippery`)
//! plus gymnasium's `success_rate` (1/3). RAGEN's `map_seed` is always the episode seed here.

use ragen_gym_sdk::{EnvError, parse_config};
use serde::{Deserialize, Serialize};

/// Configuration of one FrozenLake env (the plugin's config JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FrozenLakeConfig {
    /// Side of the square map. 2..=16.
    pub size: u32,
    /// Probability that a cell is frozen (so `1 - p` is the hole probability). In (0, 1].
    pub p: f64,
    /// Whether moves slip (gymnasium `is_slippery`).
    pub is_slippery: bool,
    /// Probability that a slippery move goes the intended way; each perpendicular direction gets
    /// half of the rest (gymnasium `success_rate`). In [0, 1].
    pub success_rate: f64,
}

impl Default for FrozenLakeConfig {
    fn default() -> Self {
        Self {
            size: 4,
            p: 0.8,
            is_slippery: true,
            success_rate: 1.0 / 3.0,
        }
    }
}

impl FrozenLakeConfig {
    /// Parse and validate a config JSON object (`""` means the defaults).
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] naming the field that is unknown, mistyped or out of range.
    pub fn from_json(json: &str) -> Result<Self, EnvError> {
        let config: Self = parse_config(json)?;
        config.validate()?;
        Ok(config)
    }

    /// Check the ranges documented on each field.
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |field: &str, why: String| {
            Err(EnvError::InvalidConfig(format!("field `{field}`: {why}")))
        };
        if !(2..=16).contains(&self.size) {
            return bad("size", format!("{} is outside 2..=16", self.size));
        }
        if !(self.p > 0.0 && self.p <= 1.0) {
            return bad("p", format!("{} is outside (0, 1]", self.p));
        }
        if !(0.0..=1.0).contains(&self.success_rate) {
            return bad(
                "success_rate",
                format!("{} is outside [0, 1]", self.success_rate),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ragens() {
        let config = FrozenLakeConfig::from_json(" ").unwrap();
        assert_eq!(config.size, 4);
        assert_eq!(config.p, 0.8);
        assert!(config.is_slippery);
        assert_eq!(config.success_rate, 1.0 / 3.0);
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |json: &str| match FrozenLakeConfig::from_json(json) {
            Err(EnvError::InvalidConfig(msg)) => msg,
            other => panic!("expected invalid config for {json}, got {other:?}"),
        };
        assert!(err(r#"{"slippery":true}"#).contains("slippery"));
        assert!(err(r#"{"size":4,"is_slippery":"yes"}"#).contains("is_slippery"));
        assert!(err(r#"{"p":0}"#).contains("`p`"));
        assert!(err(r#"{"success_rate":1.5}"#).contains("success_rate"));
        assert!(err(r#"{"size":1}"#).contains("size"));
        assert!(err("not json").contains("JSON"));
    }
}
