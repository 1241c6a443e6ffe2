//! The bridge's env config (JSON, strict).

use serde::{Deserialize, Serialize};

/// Which standard WebShop goal split the reset seed indexes (`baseline_models/env.py`; RAGEN
/// `ragen/env/webshop`): test = goals 0-499, dev = 500-1499, train = 1500 and up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Goal `seed % 500`.
    Test,
    /// Goal `500 + seed % 1000`.
    Dev,
    /// Goal `1500 + seed` (the server bounds it by its goal count).
    #[default]
    Train,
}

impl Split {
    /// The goal index (AgentGym `session_id`) for a reset seed.
    pub fn goal_index(self, seed: u64) -> u64 {
        match self {
            Split::Test => seed % 500,
            Split::Dev => 500 + seed % 1000,
            Split::Train => 1500u64.saturating_add(seed % (u64::MAX - 1500)),
        }
    }
}

/// Configuration of one WebShop bridge env.
///
/// Example: `{"server": "127.0.0.1:3000", "split": "test", "max_turns": 9}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BridgeConfig {
    /// `HOST:PORT` of an AgentGym-protocol WebShop server (`ragen-gym webshop serve`, or
    /// AgentGym's `webshop --port 36001`). The plugin manifest must declare it and the user must
    /// grant it (`--allow-host`).
    pub server: String,
    /// Goal split the reset seed indexes.
    pub split: Split,
    /// Actions per episode before truncation (RAGEN's `WebShop` tag: `max_turn` 9; 15 for
    /// verl-agent/ReAct parity).
    pub max_turns: u32,
    /// Append the list of available actions to each observation (RAGEN's render).
    pub list_actions: bool,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            server: "127.0.0.1:3000".into(),
            split: Split::Train,
            max_turns: 9,
            list_actions: true,
        }
    }
}

impl BridgeConfig {
    /// `http://HOST:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::EnvError;

    /// `json` parsed and checked the way the host does it ([`ragen_gym_sdk::adapter::config`]).
    fn parse(json: &str) -> Result<BridgeConfig, EnvError> {
        ragen_gym_sdk::adapter::config::<crate::WebShopBridge<crate::guest::GuestHttp>>(json)
    }

    #[test]
    fn splits_follow_the_standard_ranges() {
        assert_eq!(Split::Test.goal_index(0), 0);
        assert_eq!(Split::Test.goal_index(1234), 234);
        assert_eq!(Split::Dev.goal_index(0), 500);
        assert_eq!(Split::Dev.goal_index(1999), 1499);
        assert_eq!(Split::Train.goal_index(0), 1500);
        assert_eq!(Split::Train.goal_index(7), 1507);
    }

    #[test]
    fn config_is_strict_and_names_fields() {
        assert_eq!(parse("").unwrap(), BridgeConfig::default());
        let c = parse(r#"{"server":"localhost:36001","split":"test"}"#).unwrap();
        assert_eq!(
            (c.server.as_str(), c.split, c.max_turns),
            ("localhost:36001", Split::Test, 9)
        );
        for (bad, field) in [
            (r#"{"sever":"x:1"}"#, "sever"),
            (r#"{"server":"nohost"}"#, "server"),
            (r#"{"server":"h:99999"}"#, "server"),
            (r#"{"max_turns":0}"#, "max_turns"),
            (r#"{"split":"val"}"#, "val"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }
}
