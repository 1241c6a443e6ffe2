//! The Bandit env config (JSON, strict).
//!
//! Keys and defaults follow RAGEN's `BanditEnvConfig` with the `Bandit` tag's capitalised names
//! (`lo_arm_name` "Phoenix", `hi_arm_name` "Dragon"). The low arm pays `lo_arm_score` (0.1 in
//! RAGEN's code; the paper says 0.15); the high arm pays `hi_arm_hiscore` with probability
//! `hi_arm_hiscore_prob`, else `hi_arm_loscore`.

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
    /// It changes what the reward is, so it is opt-in (docs/learning.md, "Bandit").
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::EnvError;

    /// `json` parsed and checked the way the host does it ([`ragen_gym_sdk::adapter::config`]).
    fn parse(json: &str) -> Result<BanditConfig, EnvError> {
        ragen_gym_sdk::adapter::config::<crate::Bandit>(json)
    }

    #[test]
    fn defaults_are_ragens_bandit_tag() {
        let config = parse("").unwrap();
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
        let paper = parse(r#"{"lo_arm_score": 0.15}"#).unwrap();
        assert_eq!(paper.lo_arm_score, 0.15);
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |json: &str| match parse(json) {
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
        assert_eq!(parse("").unwrap().payout, Payout::Sampled);
        let expected = parse(r#"{"payout":"expected"}"#).unwrap();
        assert_eq!(expected.payout, Payout::Expected);
        // RAGEN's arms: 0.25 * 1.0 + 0.75 * 0.0
        assert_eq!(expected.hi_arm_mean(), 0.25);
        let worse =
            parse(r#"{"hi_arm_hiscore":2.0,"hi_arm_loscore":-0.5,"hi_arm_hiscore_prob":0.1}"#)
                .unwrap();
        // 0.1 * 2.0 + 0.9 * -0.5 = -0.25
        assert!((worse.hi_arm_mean() + 0.25).abs() < 1e-12);
    }
}
