//! The Bandit env config (JSON, strict).
//!
//! Keys and defaults follow RAGEN's `BanditEnvConfig` with the `Bandit` tag's capitalised names
//! (`lo_arm_name` "Phoenix", `hi_arm_name` "Dragon"). The low arm pays `lo_arm_score` (0.1 in
//! RAGEN's code; the paper says 0.15); the high arm pays `hi_arm_hiscore` with probability
//! `hi_arm_hiscore_prob`, else `hi_arm_loscore`.

use ragen_gym_sdk::{EnvError, parse_config};
use serde::{Deserialize, Serialize};

/// What a pull pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payout {
    /// A draw from the arm's distribution (RAGEN): the high arm pays `hi_arm_hiscore` with
    /// probability `hi_arm_hiscore_prob`, else `hi_arm_loscore`.
    #[default]
    Sampled,
    /// The arm's expected payout, `p * hi_arm_hiscore + (1 - p) * hi_arm_loscore` for the high
    /// arm (a ragen-gym option, not RAGEN's): the Rao-Blackwellised reward, `E[reward | arm]`.
    /// Without a reward filter the expected policy gradient is the same as with sampled payouts
    /// and only the payout noise is gone; `success` (the high arm was picked) does not change.
    /// It changes what the reward is, so it is opt-in (README, "Learning on a laptop").
    Expected,
}

/// Configuration of one Bandit env (the plugin's config JSON).
///
/// RAGEN's `BanditTest` tag is `{"lo_arm_name": "Trader", "hi_arm_name": "Librarian"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BanditConfig {
    /// Name of the safe arm (non-empty, no `|`, different from `hi_arm_name` ignoring case).
    pub lo_arm_name: String,
    /// Name of the risky arm with the higher expected reward.
    pub hi_arm_name: String,
    /// Fixed payout of the low arm.
    pub lo_arm_score: f64,
    /// Payout of the high arm when it loses.
    pub hi_arm_loscore: f64,
    /// Payout of the high arm when it wins.
    pub hi_arm_hiscore: f64,
    /// Probability that the high arm wins, in [0, 1].
    pub hi_arm_hiscore_prob: f64,
    /// What a pull pays: a draw (`"sampled"`, RAGEN) or the arm's mean (`"expected"`).
    pub payout: Payout,
}

impl Default for BanditConfig {
    fn default() -> Self {
        Self {
            lo_arm_name: "Phoenix".to_string(),
            hi_arm_name: "Dragon".to_string(),
            lo_arm_score: 0.1,
            hi_arm_loscore: 0.0,
            hi_arm_hiscore: 1.0,
            hi_arm_hiscore_prob: 0.25,
            payout: Payout::Sampled,
        }
    }
}

impl BanditConfig {
    /// The high arm's expected payout, `p * hi_arm_hiscore + (1 - p) * hi_arm_loscore`.
    pub fn hi_arm_mean(&self) -> f64 {
        let p = self.hi_arm_hiscore_prob;
        p * self.hi_arm_hiscore + (1.0 - p) * self.hi_arm_loscore
    }

    /// Parse and validate a config JSON object (`""` means the defaults).
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] naming the field that is unknown, mistyped or out of range.
    pub fn from_json(json: &str) -> Result<Self, EnvError> {
        let config: Self = parse_config(json)?;
        config.validate()?;
        Ok(config)
    }

    /// Check the constraints documented on each field.
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] naming the first field that breaks one.
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |field: &str, why: String| {
            Err(EnvError::InvalidConfig(format!("field `{field}`: {why}")))
        };
        for (field, name) in [
            ("lo_arm_name", &self.lo_arm_name),
            ("hi_arm_name", &self.hi_arm_name),
        ] {
            if name.trim().is_empty() || name.trim() != name {
                return bad(
                    field,
                    format!("{name:?} must be non-empty without surrounding spaces"),
                );
            }
            if name.contains('|') || name.contains('\n') {
                return bad(field, format!("{name:?} must not contain `|` or a newline"));
            }
        }
        if self.lo_arm_name.eq_ignore_ascii_case(&self.hi_arm_name) {
            return bad(
                "hi_arm_name",
                format!("{:?} is the same as lo_arm_name", self.hi_arm_name),
            );
        }
        for (field, value) in [
            ("lo_arm_score", self.lo_arm_score),
            ("hi_arm_loscore", self.hi_arm_loscore),
            ("hi_arm_hiscore", self.hi_arm_hiscore),
        ] {
            if !value.is_finite() {
                return bad(field, format!("{value} is not finite"));
            }
        }
        if !(0.0..=1.0).contains(&self.hi_arm_hiscore_prob) {
            return bad(
                "hi_arm_hiscore_prob",
                format!("{} is outside [0, 1]", self.hi_arm_hiscore_prob),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ragens_bandit_tag() {
        let config = BanditConfig::from_json("").unwrap();
        assert_eq!(
            (config.lo_arm_name.as_str(), config.hi_arm_name.as_str()),
            ("Phoenix", "Dragon")
        );
        assert_eq!(
            (
                config.lo_arm_score,
                config.hi_arm_hiscore,
                config.hi_arm_hiscore_prob
            ),
            (0.1, 1.0, 0.25)
        );
        let paper = BanditConfig::from_json(r#"{"lo_arm_score": 0.15}"#).unwrap();
        assert_eq!(paper.lo_arm_score, 0.15);
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |json: &str| match BanditConfig::from_json(json) {
            Err(EnvError::InvalidConfig(msg)) => msg,
            other => panic!("expected invalid config for {json}, got {other:?}"),
        };
        assert!(err(r#"{"arms":2}"#).contains("arms"));
        assert!(err(r#"{"lo_arm_score":"high"}"#).contains("lo_arm_score"));
        assert!(err(r#"{"hi_arm_hiscore_prob":2}"#).contains("hi_arm_hiscore_prob"));
        assert!(err(r#"{"hi_arm_name":"phoenix"}"#).contains("hi_arm_name"));
        assert!(err(r#"{"lo_arm_name":""}"#).contains("lo_arm_name"));
        assert!(err(r#"{"lo_arm_name":"a||b"}"#).contains("lo_arm_name"));
        assert!(err(r#"{"payout":"mean"}"#).contains("payout"));
    }

    #[test]
    fn payout_is_sampled_unless_asked() {
        assert_eq!(BanditConfig::from_json("").unwrap().payout, Payout::Sampled);
        let expected = BanditConfig::from_json(r#"{"payout":"expected"}"#).unwrap();
        assert_eq!(expected.payout, Payout::Expected);
        // RAGEN's arms: 0.25 * 1.0 + 0.75 * 0.0
        assert_eq!(expected.hi_arm_mean(), 0.25);
        let worse = BanditConfig::from_json(
            r#"{"hi_arm_hiscore":2.0,"hi_arm_loscore":-0.5,"hi_arm_hiscore_prob":0.1}"#,
        )
        .unwrap();
        // 0.1 * 2.0 + 0.9 * -0.5 = -0.25
        assert!((worse.hi_arm_mean() + 0.25).abs() < 1e-12);
    }
}
