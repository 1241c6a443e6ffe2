//! The AgentGym env-server protocol (`agentenv-webshop`; `shared/spec/webshop.md` §5.1) over a
//! pluggable [`Transport`], so the bridge logic runs natively in tests and over the host's
//! gated `ragen:gym/http` import in the sandbox.

use serde::Deserialize;
use serde_json::{Value, json};

/// Performs one HTTP request. On wasm this is the host's `ragen:gym/http.fetch`; natively it can
/// be anything (tests call the WebShop server in-process).
pub trait Transport {
    /// Send `method url` with a JSON `body` (empty for GET). Returns the status and the body
    /// text, or a message when no response came back (denied, refused, timed out, ...).
    ///
    /// # Errors
    /// A human-readable reason.
    fn request(&mut self, method: &str, url: &str, body: &str) -> Result<(u16, String), String>;
}

/// `GET /available_actions`: what the current page offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AvailableActions {
    /// Only the home page has a search bar.
    pub has_search_bar: bool,
    /// Lowercased clickable texts.
    pub clickables: Vec<String>,
}

/// `POST /step`'s reply.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StepReply {
    /// The new simple-mode observation.
    pub state: String,
    /// Reward (non-zero only at purchase).
    pub reward: f64,
    /// True after `click[buy now]`.
    pub done: bool,
    /// `null` on AgentGym; the reward breakdown at purchase on `ragen-gym webshop serve`.
    #[serde(default)]
    pub info: Value,
}

/// A client of one AgentGym WebShop server.
pub struct AgentGymClient<T> {
    transport: T,
    base_url: String,
}

impl<T: Transport> AgentGymClient<T> {
    /// A client of the server at `base_url` (`http://HOST:PORT`).
    pub fn new(transport: T, base_url: String) -> Self {
        Self {
            transport,
            base_url,
        }
    }

    fn call<R: serde::de::DeserializeOwned>(
        &mut self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<R, String> {
        let url = format!("{}{path}", self.base_url);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let what = || format!("webshop server {}: {method} {path}", self.base_url);
        let (status, text) = self
            .transport
            .request(method, &url, &body)
            .map_err(|e| format!("{} failed: {e}", what()))?;
        if status != 200 {
            let snippet: String = text.chars().take(200).collect();
            return Err(format!("{} returned HTTP {status}: {snippet}", what()));
        }
        serde_json::from_str(&text)
            .map_err(|e| format!("{} returned an unexpected body ({e})", what()))
    }

    /// `POST /create` → an opaque env id.
    ///
    /// # Errors
    /// Transport failures, non-200 statuses and unexpected bodies, as messages.
    pub fn create(&mut self) -> Result<i64, String> {
        self.call("POST", "/create", None)
    }

    /// `POST /reset {"env_idx", "session_id"}` → the first observation.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn reset(&mut self, env_idx: i64, goal_index: u64) -> Result<String, String> {
        let reply: (String, Value) = self.call(
            "POST",
            "/reset",
            Some(json!({"env_idx": env_idx, "session_id": goal_index})),
        )?;
        Ok(reply.0)
    }

    /// `POST /step {"env_idx", "action"}`.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn step(&mut self, env_idx: i64, action: &str) -> Result<StepReply, String> {
        self.call(
            "POST",
            "/step",
            Some(json!({"env_idx": env_idx, "action": action})),
        )
    }

    /// `GET /available_actions?env_idx=N`.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn available_actions(&mut self, env_idx: i64) -> Result<AvailableActions, String> {
        self.call(
            "GET",
            &format!("/available_actions?env_idx={env_idx}"),
            None,
        )
    }

    /// `GET /observation?env_idx=N`.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn observation(&mut self, env_idx: i64) -> Result<String, String> {
        self.call("GET", &format!("/observation?env_idx={env_idx}"), None)
    }
}
