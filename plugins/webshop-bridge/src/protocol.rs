//! The AgentGym env-server protocol (`agentenv-webshop/agentenv_webshop/server.py`) over a
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

/// Why a call to the server failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No response came back (denied by the host, refused, timed out, ...).
    Transport {
        /// `webshop server URL: METHOD PATH`.
        call: String,
        /// The transport's reason.
        reason: String,
    },
    /// The server answered with a status other than 200.
    Status {
        /// `webshop server URL: METHOD PATH`.
        call: String,
        /// The HTTP status.
        status: u16,
        /// The first 200 characters of the body.
        snippet: String,
    },
    /// A 200 whose body is not the route's JSON shape.
    Body {
        /// `webshop server URL: METHOD PATH`.
        call: String,
        /// serde_json's message.
        reason: String,
    },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Transport { call, reason } => write!(f, "{call} failed: {reason}"),
            CallError::Status {
                call,
                status,
                snippet,
            } => write!(f, "{call} returned HTTP {status}: {snippet}"),
            CallError::Body { call, reason } => {
                write!(f, "{call} returned an unexpected body ({reason})")
            }
        }
    }
}

impl std::error::Error for CallError {}

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
    ) -> Result<R, CallError> {
        let url = format!("{}{path}", self.base_url);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let call = || format!("webshop server {}: {method} {path}", self.base_url);
        let (status, text) = self
            .transport
            .request(method, &url, &body)
            .map_err(|reason| CallError::Transport {
                call: call(),
                reason,
            })?;
        if status != 200 {
            return Err(CallError::Status {
                call: call(),
                status,
                snippet: text.chars().take(200).collect(),
            });
        }
        serde_json::from_str(&text).map_err(|e| CallError::Body {
            call: call(),
            reason: e.to_string(),
        })
    }

    /// `POST /create` → an opaque env id.
    ///
    /// # Errors
    /// [`CallError`] for transport failures, non-200 statuses and unexpected bodies.
    pub fn create(&mut self) -> Result<i64, CallError> {
        self.call("POST", "/create", None)
    }

    /// `POST /reset {"env_idx", "session_id"}` → the first observation.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn reset(&mut self, env_idx: i64, goal_index: u64) -> Result<String, CallError> {
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
    pub fn step(&mut self, env_idx: i64, action: &str) -> Result<StepReply, CallError> {
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
    pub fn available_actions(&mut self, env_idx: i64) -> Result<AvailableActions, CallError> {
        self.call(
            "GET",
            &format!("/available_actions?env_idx={env_idx}"),
            None,
        )
    }

    /// `POST /close {"env_idx"}` (an extension of `ragen-gym webshop serve`; AgentGym's server
    /// answers 404).
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn close(&mut self, env_idx: i64) -> Result<bool, CallError> {
        self.call("POST", "/close", Some(json!({"env_idx": env_idx})))
    }

    /// `GET /observation?env_idx=N`.
    ///
    /// # Errors
    /// As [`AgentGymClient::create`].
    pub fn observation(&mut self, env_idx: i64) -> Result<String, CallError> {
        self.call("GET", &format!("/observation?env_idx={env_idx}"), None)
    }
}
