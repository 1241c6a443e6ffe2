//! The WebShop bridge env: RAGEN-style agent-facing behaviour (RAGEN `ragen/env/webshop/env.py`)
//! on top of an AgentGym WebShop server.

use ragen_gym_sdk::{
    Capabilities, EnvError, EnvSpec, Environment, Metric, ResetResult, StepResult,
};

use crate::config::BridgeConfig;
use crate::protocol::{AgentGymClient, AvailableActions, CallError, Transport};

/// Instruction for the model's prompt.
pub const INSTRUCTION: &str = "You are shopping in an online store. Find and buy the product that fits the \
instruction as closely as you can: search for it, open a matching product, select the options the \
instruction asks for (such as size and colour), then buy it. Answer with exactly one of the available \
actions, for example search[machine wash women's t-shirt] or click[buy now].";

/// Reward at or above which a purchase counts as a success (WebShop's success rate counts
/// `reward == 1`: the SR metric of Yao et al. 2022).
pub const SUCCESS_REWARD: f64 = 1.0 - 1e-9;

/// Parse `name[arg]` like WebShop's `re.match(r'(.+)\[(.+)\]', action)` on the first line.
///
/// A copy of the host server's `host/webshop/src/env.rs::parse_action` (this guest builds
/// against the SDK alone); the property test `parse_action_agrees_with_the_upstream_regex`
/// checks both against the regex.
pub fn parse_action(action: &str) -> Option<(&str, &str)> {
    let line = action.split('\n').next().unwrap_or("");
    let close = line.rfind(']')?;
    if close < 3 {
        return None;
    }
    let open = line.as_bytes()[1..close - 1]
        .iter()
        .rposition(|&b| b == b'[')?
        + 1;
    Some((&line[..open], &line[open + 1..close]))
}

/// The actions listed for the model (RAGEN's `get_available_actions`): `search[<content>]` when
/// the page has a search bar, `click[x]` for every clickable except `search`, and no
/// `click[next >]` on a results page past the end (clickables exactly `back to search, < prev,
/// next >`).
pub fn actions_for_model(available: &AvailableActions) -> Vec<String> {
    let mut out = Vec::new();
    if available.has_search_bar {
        out.push("search[<content>]".to_string());
    }
    let past_end = available.clickables == ["back to search", "< prev", "next >"];
    for c in &available.clickables {
        if c == "search" || (past_end && c == "next >") {
            continue;
        }
        out.push(format!("click[{c}]"));
    }
    out
}

/// Whether the server will act on `action` on a page offering `available`
/// (`web_agent_text_env.py::step`): a
/// `search[...]` with a non-empty query (accepted on every page), or a `click[x]` on a current
/// clickable other than `search`.
pub fn is_valid_action(action: &str, available: &AvailableActions) -> bool {
    match parse_action(action) {
        Some(("search", q)) => !q.is_empty(),
        Some(("click", x)) => {
            let x = x.to_lowercase();
            x != "search" && available.clickables.contains(&x)
        }
        _ => false,
    }
}

/// The WebShop bridge over a transport `T`.
pub struct WebShopBridge<T: Transport> {
    config: BridgeConfig,
    client: AgentGymClient<T>,
    env_idx: Option<i64>,
    goal_index: u64,
    observation: String,
    available: AvailableActions,
    steps: u32,
    over: bool,
}

impl<T: Transport> WebShopBridge<T> {
    /// A bridge with an explicit transport (natively: tests; on wasm: the host import).
    ///
    /// # Errors
    /// [`EnvError::InvalidConfig`] for a bad config.
    pub fn with_transport(config: &str, transport: T) -> Result<Self, EnvError> {
        // The config and its check (`Environment::check_config`) do not depend on the transport.
        let config =
            ragen_gym_sdk::adapter::config::<WebShopBridge<crate::guest::GuestHttp>>(config)?;
        Ok(Self::with_config(config, transport))
    }

    /// A bridge with a checked config and an explicit transport.
    pub fn with_config(config: BridgeConfig, transport: T) -> Self {
        let client = AgentGymClient::new(transport, config.base_url());
        Self {
            config,
            client,
            env_idx: None,
            goal_index: 0,
            observation: String::new(),
            available: AvailableActions::default(),
            steps: 0,
            over: true,
        }
    }

    /// The config in use.
    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// The current simple-mode page text (without the action list).
    pub fn page_text(&self) -> &str {
        &self.observation
    }

    /// What the current page offers.
    pub fn available_actions(&self) -> &AvailableActions {
        &self.available
    }

    fn render(&self) -> String {
        if !self.config.list_actions
            || (self.available.clickables.is_empty() && !self.available.has_search_bar)
        {
            return self.observation.clone();
        }
        format!(
            "{}\nAvailable actions: {}",
            self.observation,
            actions_for_model(&self.available).join(", ")
        )
    }

    fn server_error(e: CallError) -> EnvError {
        EnvError::Other(e.to_string())
    }

    /// Start an episode on the goal the seed indexes in the configured split.
    ///
    /// # Errors
    /// [`EnvError::Other`] naming the server and the failed call.
    pub fn reset_episode(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        self.over = true;
        let env_idx = match self.env_idx {
            Some(id) => id,
            None => {
                let id = self.client.create().map_err(Self::server_error)?;
                self.env_idx = Some(id);
                id
            }
        };
        self.goal_index = self.config.split.goal_index(seed);
        let (env_idx, mut obs) = match self.client.reset(env_idx, self.goal_index) {
            // The server closed our session (its idle timeout, or a restart): open a new one.
            Err(CallError::Status { status: 404, .. }) => {
                self.env_idx = None;
                let id = self.client.create().map_err(Self::server_error)?;
                self.env_idx = Some(id);
                let obs = self
                    .client
                    .reset(id, self.goal_index)
                    .map_err(Self::server_error)?;
                (id, obs)
            }
            other => (env_idx, other.map_err(Self::server_error)?),
        };
        if obs.trim().is_empty() {
            obs = self
                .client
                .observation(env_idx)
                .map_err(Self::server_error)?;
        }
        self.available = self
            .client
            .available_actions(env_idx)
            .map_err(Self::server_error)?;
        self.observation = obs;
        self.steps = 0;
        self.over = false;
        Ok(ResetResult {
            observation: self.render(),
            info: vec![Metric::new("goal_index", self.goal_index as f64)],
        })
    }

    /// Forward one action to the server (invalid ones too: upstream treats them as no-ops).
    ///
    /// # Errors
    /// [`EnvError::NotReady`] before `reset` or after the episode ended; [`EnvError::Other`] when
    /// the server cannot be reached or answers unexpectedly.
    pub fn step_action(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let Some(env_idx) = self.env_idx.filter(|_| !self.over) else {
            return Err(EnvError::NotReady(
                "webshop-bridge: call reset before step (or after the episode ended)".into(),
            ));
        };
        let action = action.trim();
        let valid = is_valid_action(action, &self.available);
        let reply = self
            .client
            .step(env_idx, action)
            .map_err(Self::server_error)?;
        self.steps += 1;
        let effective = reply.state != self.observation;
        self.observation = reply.state;
        self.available = if reply.done {
            AvailableActions::default()
        } else {
            self.client
                .available_actions(env_idx)
                .map_err(Self::server_error)?
        };
        let reward = if reply.reward.is_finite() {
            reply.reward.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let terminated = reply.done;
        let truncated = !terminated && self.steps >= self.config.max_turns;
        self.over = terminated || truncated;
        let mut info = vec![
            Metric::new("raw_reward", reward),
            Metric::new("goal_index", self.goal_index as f64),
        ];
        if terminated {
            info.push(Metric::new("success_purchase", 1.0));
            for key in ["r_type", "r_att", "r_option", "r_price", "title_score"] {
                if let Some(v) = reply.info.get(key).and_then(serde_json::Value::as_f64) {
                    info.push(Metric::new(key, v));
                }
            }
        }
        Ok(StepResult {
            observation: self.render(),
            reward,
            terminated,
            truncated,
            action_is_valid: valid,
            action_is_effective: effective,
            success: terminated && reward >= SUCCESS_REWARD,
            info,
        })
    }
}

impl<T: Transport> Drop for WebShopBridge<T> {
    /// Close the server session when the host drops the env (a no-op where the server has no
    /// `/close`; an instance discarded after a trap never gets here, and the server's idle
    /// timeout closes its session instead).
    fn drop(&mut self) {
        if let Some(id) = self.env_idx.take() {
            let _ = self.client.close(id);
        }
    }
}

/// Describe the env for a config, as the component does.
///
/// # Errors
/// [`EnvError::InvalidConfig`] for a bad config.
pub fn spec_for(config: &str) -> Result<EnvSpec, EnvError> {
    ragen_gym_sdk::adapter::spec::<WebShopBridge<crate::guest::GuestHttp>>(config)
}

impl<T: Transport + Default + 'static> Environment for WebShopBridge<T> {
    const ID: &'static str = "ragen/WebShop-v0";
    const CAPABILITIES: Capabilities = Capabilities::http(&[
        "127.0.0.1:3000",
        "localhost:3000",
        "127.0.0.1:36001",
        "localhost:36001",
    ]);
    type Config = BridgeConfig;

    fn check_config(config: &BridgeConfig) -> Result<(), EnvError> {
        // The constraints documented on the fields of `BridgeConfig`; the SDK runs this after parsing
        // (`ragen_gym_sdk::adapter::config`), before `spec` and `new`.
        let c = config;
        let (host, port) = c.server.rsplit_once(':').ok_or_else(|| {
            EnvError::InvalidConfig(format!("field `server`: `{}` is not HOST:PORT", c.server))
        })?;
        if host.is_empty() || host.contains(['/', '@', ' ']) || port.parse::<u16>().is_err() {
            return Err(EnvError::InvalidConfig(format!(
                "field `server`: `{}` is not HOST:PORT",
                c.server
            )));
        }
        if !(1..=100).contains(&c.max_turns) {
            return Err(EnvError::InvalidConfig(format!(
                "field `max_turns`: {} is not in 1..=100",
                c.max_turns
            )));
        }
        Ok(())
    }

    fn spec(config: &BridgeConfig) -> EnvSpec {
        EnvSpec::new(INSTRUCTION)
            .max_steps(config.max_turns)
            .reward_threshold(1.0)
    }

    fn new(config: BridgeConfig) -> Result<Self, EnvError> {
        Ok(Self::with_config(config, T::default()))
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        self.reset_episode(seed)
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        self.step_action(action)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ragen_gym_webshop::{Catalog, Shop};

    use super::*;

    /// Calls the WebShop server's routes in-process; `fail_after` simulates the server going away.
    struct InProcess {
        shop: Arc<Shop>,
        calls: usize,
        fail_after: Option<usize>,
    }

    impl Transport for InProcess {
        fn request(
            &mut self,
            method: &str,
            url: &str,
            body: &str,
        ) -> Result<(u16, String), String> {
            self.calls += 1;
            if self.fail_after.is_some_and(|n| self.calls > n) {
                return Err("connection refused".into());
            }
            let path = url
                .strip_prefix("http://127.0.0.1:3000")
                .ok_or("wrong server")?;
            let r = self.shop.handle(method, path, body.as_bytes());
            Ok((r.status, r.body))
        }
    }

    fn bridge(fail_after: Option<usize>) -> (WebShopBridge<InProcess>, Arc<Shop>) {
        let shop = Arc::new(Shop::new(Catalog::embedded()));
        let t = InProcess {
            shop: shop.clone(),
            calls: 0,
            fail_after,
        };
        (
            WebShopBridge::with_transport(r#"{"split":"test"}"#, t).unwrap(),
            shop,
        )
    }

    fn goal_seed(shop: &Shop, asin: &str, first_option: &str) -> u64 {
        shop.catalog().goal_index(asin, first_option).unwrap()
    }

    #[test]
    fn reset_shows_the_home_page_and_the_actions() {
        let (mut env, shop) = bridge(None);
        let r = env.reset_episode(3).unwrap();
        let instr = &shop.catalog().goals[3].instruction_text;
        assert_eq!(
            r.observation,
            format!(
                "WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search\nAvailable actions: search[<content>]"
            )
        );
    }

    #[test]
    fn worked_example_episode_scores_one_and_succeeds() {
        let (mut env, shop) = bridge(None);
        env.reset_episode(goal_seed(&shop, "B0WS000001", "black"))
            .unwrap();
        let s = env.step_action("search[cotton spandex t-shirt]").unwrap();
        assert!(s.action_is_valid && s.action_is_effective && !s.terminated);
        assert!(
            s.observation.contains("click[b0ws000001]"),
            "{}",
            s.observation
        );
        assert!(!s.observation.contains("click[search]"));
        env.step_action("click[B0WS000001]").unwrap();
        let opt = env.step_action("click[black]").unwrap();
        assert!(
            opt.action_is_valid && !opt.action_is_effective,
            "simple mode does not show the selection"
        );
        // The goal's own size (an x-large scores 0.8 against this synthetic goal).
        env.step_action("click[large]").unwrap();
        let buy = env.step_action("click[buy now]").unwrap();
        assert_eq!(
            (buy.reward, buy.terminated, buy.truncated, buy.success),
            (1.0, true, false, true)
        );
        assert!(
            buy.info
                .iter()
                .any(|m| m.name == "r_type" && m.value == 1.0)
        );
        assert!(matches!(
            env.step_action("click[buy now]"),
            Err(EnvError::NotReady(_))
        ));
    }

    #[test]
    fn wrong_noun_purchase_scores_zero() {
        let (mut env, shop) = bridge(None);
        env.reset_episode(goal_seed(&shop, "B0WS000019", "black"))
            .unwrap();
        env.step_action("search[insulated]").unwrap();
        env.step_action("click[b0ws000020]").unwrap();
        let buy = env.step_action("click[buy now]").unwrap();
        assert_eq!(
            (buy.reward, buy.terminated, buy.success),
            (0.0, true, false)
        );
    }

    #[test]
    fn invalid_actions_are_no_ops_and_the_episode_truncates_at_max_turns() {
        let (mut env, _) = bridge(None);
        let first = env.reset_episode(0).unwrap().observation;
        for i in 1..=9 {
            let s = env
                .step_action(if i % 2 == 0 {
                    "click[search]"
                } else {
                    "buy the shirt"
                })
                .unwrap();
            assert!(!s.action_is_valid && !s.action_is_effective);
            assert_eq!(s.observation, first);
            assert_eq!(s.reward, 0.0);
            assert_eq!(s.truncated, i == 9, "step {i}");
            assert!(!s.terminated);
        }
        assert!(matches!(
            env.step_action("search[x]"),
            Err(EnvError::NotReady(_))
        ));
    }

    #[test]
    fn next_past_the_end_is_hidden_from_the_model() {
        let (mut env, _) = bridge(None);
        env.reset_episode(0).unwrap();
        env.step_action("search[spandex]").unwrap();
        let s = env.step_action("click[next >]").unwrap();
        assert_eq!(
            env.available_actions().clickables,
            ["back to search", "< prev", "next >"]
        );
        assert!(
            s.observation
                .ends_with("Available actions: click[back to search], click[< prev]"),
            "{}",
            s.observation
        );
    }

    #[test]
    fn server_failure_is_an_env_error_naming_the_server() {
        let (mut env, _) = bridge(Some(3)); // create, reset, available_actions succeed
        env.reset_episode(0).unwrap();
        let e = env.step_action("search[tee]").unwrap_err().to_string();
        assert!(
            e.contains("127.0.0.1:3000") && e.contains("/step") && e.contains("connection refused"),
            "{e}"
        );
        assert!(matches!(
            env.step_action("search[tee]"),
            Err(EnvError::Other(_))
        ));
    }

    #[test]
    fn a_session_the_server_closed_is_reopened_at_the_next_reset() {
        let (mut env, shop) = bridge(None);
        env.reset_episode(0).unwrap();
        env.step_action("search[tee]").unwrap();
        // The server drops the session (its idle timeout does this to abandoned ones).
        let id = shop.handle("GET", "/list_envs", b"").body;
        let id = id.trim_matches(['[', ']']);
        let closed = shop.handle(
            "POST",
            "/close",
            format!(r#"{{"env_idx":{id}}}"#).as_bytes(),
        );
        assert_eq!(closed.status, 200);
        assert_eq!(shop.session_count(), 0);
        // Mid-episode that is an error naming the call...
        let e = env.step_action("search[tee]").unwrap_err().to_string();
        assert!(e.contains("/step") && e.contains("404"), "{e}");
        // ...and the next reset opens a new session and plays on.
        let r = env.reset_episode(1).unwrap();
        assert!(r.observation.starts_with("WebShop [SEP] Instruction:"));
        assert_eq!(shop.session_count(), 1);
        assert!(env.step_action("search[tee]").unwrap().action_is_effective);
    }

    #[test]
    fn dropping_the_env_closes_its_server_session() {
        let (mut env, shop) = bridge(None);
        env.reset_episode(0).unwrap();
        assert_eq!(shop.session_count(), 1);
        drop(env);
        assert_eq!(shop.session_count(), 0);
    }

    #[test]
    fn spec_reports_max_turns() {
        assert_eq!(spec_for("").unwrap().max_episode_steps, 9);
        assert_eq!(
            spec_for(r#"{"max_turns":15}"#).unwrap().max_episode_steps,
            15
        );
        // The default server must be declared in the manifest, or every call would be denied.
        let manifest =
            ragen_gym_sdk::manifest::ManifestParts::env::<WebShopBridge<crate::guest::GuestHttp>>();
        let m: serde_json::Value = serde_json::from_str(&manifest.json()).unwrap();
        let declared = m["capabilities"]["http"].as_array().unwrap();
        assert!(declared.contains(&serde_json::Value::from(BridgeConfig::default().server)));
    }
}
