//! The AgentGym `agentenv-webshop` env-server routes (AgentGym `agentenv-webshop/agentenv_webshop/
//! server.py`) over a
//! [`Catalog`], and a small blocking HTTP server (tiny_http) that serves them on loopback.
//!
//! | method / path | request | response |
//! |---|---|---|
//! | `GET /` | – | `"ok"` |
//! | `GET /list_envs` | – | `[int]` |
//! | `POST /create` | – | `int` env id (opaque, from a fixed pseudo-random sequence) |
//! | `POST /reset` | `{"env_idx": int, "session_id": int\|null}` | `[observation, null]` |
//! | `POST /step` | `{"env_idx": int, "action": str}` | `{"state", "reward", "done", "info"}` |
//! | `GET /available_actions?env_idx=N` | – | `{"has_search_bar": bool, "clickables": [str]}` |
//! | `GET /observation?env_idx=N` | – | `str` |
//! | `GET /instruction_text?env_idx=N` | – | `str` (`Instruction: ...`) |
//! | `GET /state?env_idx=N` | – | `{"url", "html", "instruction_text"}` (`html` holds the simple text) |
//! | `POST /close` | `{"env_idx": int}` | `true` (an extension; AgentGym has no such route) |
//!
//! Sessions a client abandons (a plugin instance discarded after a trap never calls `/close`)
//! are closed after [`SessionLimits::idle_timeout`] without a request, and `/create` beyond
//! [`SessionLimits::max_sessions`] closes the least recently used one, so a long run's
//! sessions stay bounded. A later request on a closed session gets the usual 404.
//!
//! Differences from AgentGym: `/step`'s `info` carries the reward breakdown at purchase (AgentGym
//! returns `null`); a null `session_id` picks goals from a fixed sequence instead of weighted
//! random sampling; `/create` does not load a catalog per env. Errors use FastAPI's shape
//! `{"detail": "..."}` with status 404 (unknown env) or 422 (bad request body).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::env::ShopEnv;
use crate::error::WebShopError;
use crate::search::SearchIndex;

/// Largest env id `/create` hands out (AgentGym draws from `[0, 48950076]`).
pub const MAX_ENV_ID: u64 = 48_950_076;

/// A route's answer: HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteResponse {
    /// HTTP status code.
    pub status: u16,
    /// JSON text.
    pub body: String,
}

impl RouteResponse {
    fn ok(v: Value) -> Self {
        Self {
            status: 200,
            body: v.to_string(),
        }
    }
    fn err(status: u16, detail: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "detail": detail.into() }).to_string(),
        }
    }
}

/// SplitMix64: the fixed pseudo-random sequence behind seedless goals.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bounds on the env sessions a [`Shop`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Most sessions at once; `/create` beyond it closes the least recently used one.
    pub max_sessions: usize,
}

impl Default for SessionLimits {
    /// 10 minutes idle (far above a model's turn; the bridge opens a new session when its
    /// old one was closed between episodes), 4096 sessions.
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(600),
            max_sessions: 4096,
        }
    }
}

struct Session {
    env: ShopEnv,
    last_used: Instant,
}

/// Multiplier of the env-id permutation; coprime with `MAX_ENV_ID + 1` = 11 * 47 * 73 * 1297.
const ENV_ID_STRIDE: u64 = 904_217;

/// The `n`-th env id: `n * ENV_ID_STRIDE + 12345` modulo `MAX_ENV_ID + 1`, a permutation, so no
/// id is handed out twice in the first 48,950,077 creations (a client whose session was closed
/// gets a 404, never someone else's session).
fn env_id(n: u64) -> i64 {
    let m = MAX_ENV_ID + 1;
    ((n % m) * ENV_ID_STRIDE + 12_345).rem_euclid(m) as i64
}

struct ShopState {
    envs: BTreeMap<i64, Session>,
    created: u64,
    seedless_resets: u64,
    /// Sessions closed by the idle timeout or the session cap so far.
    expired: u64,
}

/// The shop: all env sessions over one catalog, behind the AgentGym routes. Transport-free, so
/// it can be driven in-process ([`Shop::handle`]) or over HTTP ([`WebShopServer`]).
pub struct Shop {
    catalog: Arc<Catalog>,
    index: Arc<SearchIndex>,
    limits: SessionLimits,
    state: Mutex<ShopState>,
}

impl Shop {
    /// A shop over `catalog` with no envs yet and the default [`SessionLimits`].
    pub fn new(catalog: Catalog) -> Self {
        Self::with_limits(catalog, SessionLimits::default())
    }

    /// A shop over `catalog` with no envs yet.
    pub fn with_limits(catalog: Catalog, limits: SessionLimits) -> Self {
        let index = Arc::new(SearchIndex::new(&catalog));
        Self {
            catalog: Arc::new(catalog),
            index,
            limits,
            state: Mutex::new(ShopState {
                envs: BTreeMap::new(),
                created: 0,
                seedless_resets: 0,
                expired: 0,
            }),
        }
    }

    /// Open sessions (after closing the idle ones).
    pub fn session_count(&self) -> usize {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.expire_idle(&mut state, Instant::now());
        state.envs.len()
    }

    /// Sessions closed so far by the idle timeout or the session cap.
    pub fn expired_count(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).expired
    }

    /// The catalog served.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Answer one request. `url` is the path with an optional query string; `body` is the
    /// request body (JSON for the POST routes).
    pub fn handle(&self, method: &str, url: &str, body: &[u8]) -> RouteResponse {
        self.handle_at(method, url, body, Instant::now())
    }

    /// [`Shop::handle`] as if it arrived at `now` (for tests of the session limits; `now` must
    /// not go backwards).
    pub fn handle_at(&self, method: &str, url: &str, body: &[u8], now: Instant) -> RouteResponse {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.expire_idle(&mut state, now);
        self.route(&mut state, method, path, query, body, now)
            .unwrap_or_else(|e| e)
    }

    fn expire_idle(&self, state: &mut ShopState, now: Instant) {
        let before = state.envs.len();
        let timeout = self.limits.idle_timeout;
        state
            .envs
            .retain(|_, s| now.saturating_duration_since(s.last_used) < timeout);
        let closed = before - state.envs.len();
        if closed > 0 {
            state.expired += closed as u64;
            tracing::info!(closed, ?timeout, "closed idle webshop sessions");
        }
    }

    /// Dispatch one request to its endpoint (`web_agent_site/envs/web_agent_text_env.py`'s
    /// server routes: create, reset, step, close and the read-only views).
    fn route(
        &self,
        state: &mut ShopState,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
        now: Instant,
    ) -> Result<RouteResponse, RouteResponse> {
        match (method, path) {
            ("GET", "/") => Ok(RouteResponse::ok(json!("ok"))),
            ("GET", "/list_envs") => Ok(RouteResponse::ok(json!(
                state.envs.keys().collect::<Vec<_>>()
            ))),
            ("POST", "/create") => Ok(RouteResponse::ok(json!(self.create(state, now)))),
            ("POST", "/reset") => self.reset(state, &json_body(body)?, now),
            ("POST", "/step") => step(state, &json_body(body)?, now),
            ("POST", "/close") => {
                let id = body_env(&json_body(body)?)?;
                state.envs.remove(&id).ok_or_else(|| missing(id))?;
                Ok(RouteResponse::ok(json!(true)))
            }
            ("GET", "/available_actions" | "/observation" | "/instruction_text" | "/state") => {
                view(state, path, query_env(query)?, now)
            }
            _ => Err(RouteResponse::err(404, format!("no route {method} {path}"))),
        }
    }

    /// `POST /create`: a new session (the least recently used one is closed at the cap).
    fn create(&self, state: &mut ShopState, now: Instant) -> i64 {
        if state.envs.len() >= self.limits.max_sessions.max(1) {
            let lru = state
                .envs
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(&id, _)| id);
            if let Some(lru) = lru {
                state.envs.remove(&lru);
                state.expired += 1;
                tracing::info!(
                    env = lru,
                    "closed the least recently used webshop session at the cap"
                );
            }
        }
        let mut id;
        loop {
            id = env_id(state.created);
            state.created += 1;
            if !state.envs.contains_key(&id) {
                break;
            }
        }
        let goal = self.next_seedless_goal(state);
        let env = ShopEnv::new(self.catalog.clone(), self.index.clone(), goal);
        state.envs.insert(
            id,
            Session {
                env,
                last_used: now,
            },
        );
        id
    }

    /// `POST /reset {env_idx, session_id}`: the goal `session_id`, or the next seedless one.
    fn reset(
        &self,
        state: &mut ShopState,
        v: &Value,
        now: Instant,
    ) -> Result<RouteResponse, RouteResponse> {
        let id = body_env(v)?;
        let goal = match v.get("session_id") {
            None | Some(Value::Null) => self.next_seedless_goal(state),
            Some(s) => s.as_u64().ok_or_else(|| {
                RouteResponse::err(
                    422,
                    "body field `session_id` must be a non-negative int or null",
                )
            })?,
        };
        let session = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
        session.last_used = now;
        Ok(RouteResponse::ok(json!([session.env.reset(goal), null])))
    }

    fn next_seedless_goal(&self, state: &mut ShopState) -> u64 {
        let g = splitmix64(state.seedless_resets ^ 0x5EED) % self.catalog.goals.len() as u64;
        state.seedless_resets += 1;
        g
    }
}

/// `POST /step {env_idx, action}`: one action in the session.
fn step(state: &mut ShopState, v: &Value, now: Instant) -> Result<RouteResponse, RouteResponse> {
    let id = body_env(v)?;
    let action = v
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| RouteResponse::err(422, "body field `action` (string) is required"))?;
    let session = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
    session.last_used = now;
    let out = session.env.step(action);
    Ok(RouteResponse::ok(json!({
        "state": out.state, "reward": out.reward, "done": out.done, "info": out.info,
    })))
}

/// `GET /available_actions`, `/observation`, `/instruction_text` or `/state` of session `id`.
fn view(
    state: &mut ShopState,
    path: &str,
    id: i64,
    now: Instant,
) -> Result<RouteResponse, RouteResponse> {
    let session = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
    session.last_used = now;
    let env = &session.env;
    Ok(RouteResponse::ok(match path {
        "/available_actions" => json!(env.available_actions()),
        "/observation" => json!(env.observation()),
        "/instruction_text" => json!(env.instruction_text()),
        _ => json!({
            "url": env.url(), "html": env.observation(), "instruction_text": env.instruction_text(),
        }),
    }))
}

/// The 404 of a session that does not exist.
fn missing(id: i64) -> RouteResponse {
    RouteResponse::err(404, format!("env {id} does not exist"))
}

/// The `env_idx` query parameter.
fn query_env(query: &str) -> Result<i64, RouteResponse> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("env_idx="))
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| RouteResponse::err(422, "query parameter `env_idx` (int) is required"))
}

/// The request body as JSON.
fn json_body(body: &[u8]) -> Result<Value, RouteResponse> {
    serde_json::from_slice(body)
        .map_err(|e| RouteResponse::err(422, format!("request body is not JSON: {e}")))
}

/// The body's `env_idx` field.
fn body_env(v: &Value) -> Result<i64, RouteResponse> {
    v.get("env_idx")
        .and_then(Value::as_i64)
        .ok_or_else(|| RouteResponse::err(422, "body field `env_idx` (int) is required"))
}

/// A running WebShop server: worker threads answering HTTP requests with a [`Shop`].
///
/// ```no_run
/// use ragen_gym_webshop::{Catalog, WebShopServer};
/// let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
/// println!("serving on {}", server.base_url());
/// server.stop();
/// ```
pub struct WebShopServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    shop: Arc<Shop>,
}

/// Worker threads of [`WebShopServer`].
pub const WORKERS: usize = 4;

impl WebShopServer {
    /// Bind `addr` (e.g. `127.0.0.1:3000`, or port 0 for an ephemeral port) and serve `catalog`
    /// with the default [`SessionLimits`].
    pub fn start(catalog: Catalog, addr: &str) -> Result<Self, WebShopError> {
        Self::start_with(catalog, addr, SessionLimits::default())
    }

    /// [`WebShopServer::start`] with explicit session limits.
    pub fn start_with(
        catalog: Catalog,
        addr: &str,
        limits: SessionLimits,
    ) -> Result<Self, WebShopError> {
        let server = tiny_http::Server::http(addr).map_err(|e| WebShopError::Bind {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| WebShopError::Bind {
                addr: addr.to_string(),
                reason: "not an IP socket".into(),
            })?;
        let server = Arc::new(server);
        let shop = Arc::new(Shop::with_limits(catalog, limits));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..WORKERS)
            .map(|_| {
                let (server, shop, stop) = (server.clone(), shop.clone(), stop.clone());
                std::thread::spawn(move || serve(&server, &shop, &stop))
            })
            .collect();
        tracing::info!(%bound, "webshop server listening");
        Ok(Self {
            addr: bound,
            stop,
            workers,
            shop,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shop behind the server.
    pub fn shop(&self) -> &Shop {
        &self.shop
    }

    /// Stop serving and close the listening socket; returns once the workers have exited.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Serve until the process ends.
    pub fn wait(mut self) {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for WebShopServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(server: &tiny_http::Server, shop: &Shop, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let mut request = match server.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "webshop server stopped receiving");
                return;
            }
        };
        let mut body = Vec::new();
        let reply = match std::io::Read::read_to_end(request.as_reader(), &mut body) {
            Ok(_) => shop.handle(request.method().as_str(), request.url(), &body),
            Err(e) => RouteResponse::err(400, format!("could not read the body: {e}")),
        };
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
            .expect("static header is valid");
        let response = tiny_http::Response::from_string(reply.body)
            .with_status_code(reply.status)
            .with_header(header);
        if let Err(e) = request.respond(response) {
            tracing::debug!(error = %e, "webshop client went away");
        }
    }
}

#[cfg(test)]
mod tests;
