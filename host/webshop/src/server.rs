//! The AgentGym `agentenv-webshop` env-server routes (`shared/spec/webshop.md` §5.1) over a
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
//! Differences from AgentGym: `/step`'s `info` carries the reward breakdown at purchase (AgentGym
//! returns `null`); a null `session_id` picks goals from a fixed sequence instead of weighted
//! random sampling; `/create` does not load a catalog per env. Errors use FastAPI's shape
//! `{"detail": "..."}` with status 404 (unknown env) or 422 (bad request body).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// SplitMix64: the fixed pseudo-random sequence behind env ids and seedless goals.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct ShopState {
    envs: BTreeMap<i64, ShopEnv>,
    created: u64,
    seedless_resets: u64,
}

/// The shop: all env sessions over one catalog, behind the AgentGym routes. Transport-free, so
/// it can be driven in-process ([`Shop::handle`]) or over HTTP ([`WebShopServer`]).
pub struct Shop {
    catalog: Arc<Catalog>,
    index: Arc<SearchIndex>,
    state: Mutex<ShopState>,
}

impl Shop {
    /// A shop over `catalog` with no envs yet.
    pub fn new(catalog: Catalog) -> Self {
        let index = Arc::new(SearchIndex::new(&catalog));
        Self {
            catalog: Arc::new(catalog),
            index,
            state: Mutex::new(ShopState {
                envs: BTreeMap::new(),
                created: 0,
                seedless_resets: 0,
            }),
        }
    }

    /// The catalog served.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Answer one request. `url` is the path with an optional query string; `body` is the
    /// request body (JSON for the POST routes).
    pub fn handle(&self, method: &str, url: &str, body: &[u8]) -> RouteResponse {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.route(&mut state, method, path, query, body)
            .unwrap_or_else(|e| e)
    }

    fn route(
        &self,
        state: &mut ShopState,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
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
                    let mut id;
                    loop {
                        id = (splitmix64(state.created) % (MAX_ENV_ID + 1)) as i64;
                        state.created += 1;
                        if !state.envs.contains_key(&id) {
                            break;
                        }
                    }
                    let goal = self.next_seedless_goal(state);
                    state.envs.insert(
                        id,
                        ShopEnv::new(self.catalog.clone(), self.index.clone(), goal),
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
                    let env = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
                    Ok(RouteResponse::ok(json!([env.reset(goal), null])))
                }
                ("POST", "/step") => {
                    let v = json_body()?;
                    let id = body_env(&v)?;
                    let action = v.get("action").and_then(Value::as_str).ok_or_else(|| {
                        RouteResponse::err(422, "body field `action` (string) is required")
                    })?;
                    let env = state.envs.get_mut(&id).ok_or_else(|| missing(id))?;
                    let out = env.step(action);
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
                    let env = state.envs.get(&id).ok_or_else(|| missing(id))?;
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
    /// Bind `addr` (e.g. `127.0.0.1:3000`, or port 0 for an ephemeral port) and serve `catalog`.
    pub fn start(catalog: Catalog, addr: &str) -> Result<Self, WebShopError> {
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
        let shop = Arc::new(Shop::new(catalog));
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
