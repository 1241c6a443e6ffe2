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

    fn route(
        &self,
        state: &mut ShopState,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
        now: Instant,
    ) -> Result<RouteResponse, RouteResponse> {
        let query_env = || -> Result<i64, RouteResponse> {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix("env_idx="))
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| {
                    RouteResponse::err(422, "query parameter `env_idx` (int) is required")
                })
        };
        let json_body = || -> Result<Value, RouteResponse> {
            serde_json::from_slice(body)
                .map_err(|e| RouteResponse::err(422, format!("request body is not JSON: {e}")))
        };
        let body_env = |v: &Value| -> Result<i64, RouteResponse> {
            v.get("env_idx")
                .and_then(Value::as_i64)
                .ok_or_else(|| RouteResponse::err(422, "body field `env_idx` (int) is required"))
        };
        {
            let missing = |id: i64| RouteResponse::err(404, format!("env {id} does not exist"));
            match (method, path) {
                ("GET", "/") => Ok(RouteResponse::ok(json!("ok"))),
                ("GET", "/list_envs") => Ok(RouteResponse::ok(json!(
                    state.envs.keys().collect::<Vec<_>>()
                ))),
                ("POST", "/create") => {
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
                    Ok(RouteResponse::ok(json!(id)))
                }
                ("POST", "/reset") => {
                    let v = json_body()?;
                    let id = body_env(&v)?;
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
                ("POST", "/step") => {
                    let v = json_body()?;
                    let id = body_env(&v)?;
                    let action = v.get("action").and_then(Value::as_str).ok_or_else(|| {
                        RouteResponse::err(422, "body field `action` (string) is required")
                    })?;
                    let session = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
                    session.last_used = now;
                    let out = session.env.step(action);
                    Ok(RouteResponse::ok(json!({
                        "state": out.state, "reward": out.reward, "done": out.done, "info": out.info,
                    })))
                }
                ("POST", "/close") => {
                    let id = body_env(&json_body()?)?;
                    state.envs.remove(&id).ok_or_else(|| missing(id))?;
                    Ok(RouteResponse::ok(json!(true)))
                }
                ("GET", "/available_actions" | "/observation" | "/instruction_text" | "/state") => {
                    let id = query_env()?;
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
                _ => Err(RouteResponse::err(404, format!("no route {method} {path}"))),
            }
        }
    }

    fn next_seedless_goal(&self, state: &mut ShopState) -> u64 {
        let g = splitmix64(state.seedless_resets ^ 0x5EED) % self.catalog.goals.len() as u64;
        state.seedless_resets += 1;
        g
    }
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
mod tests {
    use super::*;

    fn post(shop: &Shop, path: &str, body: Value) -> (u16, Value) {
        let r = shop.handle("POST", path, body.to_string().as_bytes());
        (r.status, serde_json::from_str(&r.body).unwrap())
    }

    fn get(shop: &Shop, url: &str) -> (u16, Value) {
        let r = shop.handle("GET", url, b"");
        (r.status, serde_json::from_str(&r.body).unwrap())
    }

    #[test]
    fn agentgym_routes_and_shapes() {
        let shop = Shop::new(Catalog::embedded());
        assert_eq!(get(&shop, "/"), (200, json!("ok")));
        let (s, id) = post(&shop, "/create", Value::Null);
        assert_eq!(s, 200);
        let id = id.as_i64().unwrap();
        assert!((0..=MAX_ENV_ID as i64).contains(&id));
        assert_eq!(get(&shop, "/list_envs"), (200, json!([id])));

        let instr = &shop.catalog().goals[3].instruction_text;
        let (s, reset) = post(&shop, "/reset", json!({"env_idx": id, "session_id": 3}));
        assert_eq!(s, 200);
        assert_eq!(
            reset,
            json!([
                format!("WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"),
                null
            ])
        );
        assert_eq!(
            get(&shop, &format!("/available_actions?env_idx={id}")),
            (
                200,
                json!({"has_search_bar": true, "clickables": ["search"]})
            )
        );
        assert_eq!(
            get(&shop, &format!("/instruction_text?env_idx={id}")),
            (200, json!(format!("Instruction: {instr}")))
        );

        let (s, step) = post(
            &shop,
            "/step",
            json!({"env_idx": id, "action": "search[tee]"}),
        );
        assert_eq!(s, 200);
        assert_eq!(step["reward"], json!(0.0));
        assert_eq!(step["done"], json!(false));
        assert_eq!(step["info"], Value::Null);
        assert_eq!(
            get(&shop, &format!("/observation?env_idx={id}")).1,
            step["state"]
        );
        let (_, state) = get(&shop, &format!("/state?env_idx={id}"));
        assert_eq!(
            state["instruction_text"],
            json!(format!("Instruction: {instr}"))
        );

        // Errors: unknown env 404, bad body 422, both in FastAPI's {"detail": ...} shape.
        let (s, e) = post(&shop, "/step", json!({"env_idx": id + 1, "action": "x"}));
        assert_eq!(s, 404);
        assert!(e["detail"].as_str().unwrap().contains("does not exist"));
        assert_eq!(shop.handle("POST", "/step", b"{not json").status, 422);
        assert_eq!(
            post(&shop, "/reset", json!({"env_idx": id, "session_id": -1})).0,
            422
        );
        assert_eq!(get(&shop, "/available_actions").0, 422);
        assert_eq!(
            post(&shop, "/close", json!({"env_idx": id})),
            (200, json!(true))
        );
        assert_eq!(get(&shop, "/list_envs"), (200, json!([])));
    }

    #[test]
    fn goal_indices_wrap_and_ids_are_deterministic() {
        let a = Shop::new(Catalog::embedded());
        let b = Shop::new(Catalog::embedded());
        let ids_a: Vec<Value> = (0..3).map(|_| post(&a, "/create", Value::Null).1).collect();
        let ids_b: Vec<Value> = (0..3).map(|_| post(&b, "/create", Value::Null).1).collect();
        assert_eq!(ids_a, ids_b);
        let n = a.catalog().goals.len() as u64;
        let id = ids_a[0].clone();
        let r1 = post(&a, "/reset", json!({"env_idx": id, "session_id": 5})).1;
        let r2 = post(
            &a,
            "/reset",
            json!({"env_idx": id, "session_id": 5 + 2 * n}),
        )
        .1;
        assert_eq!(r1, r2);
    }

    #[test]
    fn env_ids_are_never_reused() {
        let ids: std::collections::HashSet<i64> = (0..200_000).map(env_id).collect();
        assert_eq!(ids.len(), 200_000);
        assert!(ids.iter().all(|&id| (0..=MAX_ENV_ID as i64).contains(&id)));
        // The stride is a unit modulo MAX_ENV_ID + 1, so the map is a permutation.
        let (mut a, mut b) = (ENV_ID_STRIDE, MAX_ENV_ID + 1);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        assert_eq!(a, 1);
    }

    #[test]
    fn idle_sessions_close_and_the_cap_closes_the_least_recently_used() {
        let limits = SessionLimits {
            idle_timeout: Duration::from_secs(10),
            max_sessions: 3,
        };
        let shop = Shop::with_limits(Catalog::embedded(), limits);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let create = |s| {
            let r = shop.handle_at("POST", "/create", b"", at(s));
            r.body.parse::<i64>().unwrap()
        };
        let reset = |id: i64, s| {
            let body = json!({"env_idx": id, "session_id": 0}).to_string();
            shop.handle_at("POST", "/reset", body.as_bytes(), at(s))
                .status
        };
        let (a, b) = (create(0), create(1));
        // `a` stays in use; `b` is left alone past the idle timeout.
        assert_eq!(reset(a, 9), 200);
        assert_eq!(reset(a, 18), 200);
        assert_eq!(reset(b, 11), 404, "idle for 10 s");
        assert_eq!(shop.expired_count(), 1);
        // At the cap of 3, a 4th session closes the least recently used (c, used at 19).
        let c = create(19);
        let d = create(20);
        assert_eq!(reset(a, 21), 200);
        let e = create(22);
        assert_eq!(reset(c, 23), 404, "least recently used at the cap");
        assert_eq!((reset(d, 23), reset(e, 23)), (200, 200));
        let listed = shop.handle_at("GET", "/list_envs", b"", at(23)).body;
        let mut want = vec![a, d, e];
        want.sort_unstable();
        assert_eq!(listed, json!(want).to_string());
        // Everything idles out; the count goes back to zero.
        assert_eq!(shop.handle_at("GET", "/list_envs", b"", at(40)).body, "[]");
        assert_eq!(shop.expired_count(), 5);
    }

    /// A minimal HTTP/1.1 exchange over a std socket, to check the server end to end.
    fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
        (status, body)
    }

    #[test]
    fn serves_over_http_and_stops() {
        let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
        let addr = server.addr();
        let (s, id) = http(addr, "POST", "/create", "");
        assert_eq!(s, 200);
        let (s, obs) = http(
            addr,
            "POST",
            "/reset",
            &format!(r#"{{"env_idx":{id},"session_id":0}}"#),
        );
        assert_eq!(s, 200);
        assert!(
            obs.starts_with(r#"["WebShop [SEP] Instruction: [SEP] "#),
            "{obs}"
        );
        server.stop();
        // tiny_http closes its listener from its own accept thread once the server is dropped,
        // which can lag `stop()` by a moment on a loaded machine: poll for up to 5 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut closed = false;
        while std::time::Instant::now() < deadline {
            if std::net::TcpStream::connect(addr).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(closed, "listener still open 5 s after stop");
    }
}
