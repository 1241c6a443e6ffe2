//! Real servers on loopback for the network tests, each stopped when dropped:
//!
//! - [`Registry`]: Debian's `docker-registry` (the CNCF distribution registry, `registry serve`)
//!   on a free port with its storage in a temp dir;
//! - [`HttpServer`]: a small HTTP/1.1 file server on `std::net` whose responses are scripted per
//!   path (status, body, a Content-Length that may promise more than it sends, headers, and the
//!   hostile ways of sending a body: without end, a byte at a time, or never), and which counts
//!   requests;
//! - [`ChatServer`]: an OpenAI-compatible chat-completions server (tiny_http) whose answers a
//!   test scripts, recording each request and the peak number in flight.
//!
//! A missing tool fails the test with the command that installs it (`scripts/setup.sh`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `http://127.0.0.1:{port}{path}` with a raw request; the status code, or `None` when
/// nothing answers.
pub fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Poll until `ready` or `limit` passes (every 100 ms, so at most `limit / 100 ms` probes).
pub fn wait_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A `docker-registry` process.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub host: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Start a registry with filesystem storage in a temp dir, and wait (at most 20 s) until
    /// `/v2/` answers.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `docker-registry` ({e}); install it with scripts/setup.sh (apt-get install docker-registry)")
            });
        let mut r = Self {
            child,
            host: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let up = wait_until(Duration::from_secs(20), || {
            get_status(port, "/v2/") == Some(200)
        });
        if !up {
            stop(&mut r.child);
            panic!("docker-registry did not answer on {} within 20 s", r.host);
        }
        r
    }

    /// Stop the registry now (its port then refuses connections).
    pub fn stop(&mut self) {
        stop(&mut self.child);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// How a reply's body is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Sending {
    /// All at once (`{authorization}` in the body replaced by the request's header).
    #[default]
    Whole,
    /// Chunked, 64 KiB chunks of `x` without end (until the client hangs up, at most 4 GiB).
    Endless,
    /// One byte of the body every `every`.
    Trickle {
        /// The pause between bytes.
        every: Duration,
    },
    /// Nothing at all: the request is read and the connection held open (at most 120 s).
    Silent,
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Extra header lines (`Name: value`).
    pub headers: Vec<String>,
    /// The body sent.
    pub body: Vec<u8>,
    /// The Content-Length announced (the body length unless a test wants a short body).
    pub content_length: usize,
    /// How the body is sent.
    pub sending: Sending,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: &[u8]) -> Self {
        Self {
            status: 200,
            headers: vec![],
            body: body.to_vec(),
            content_length: body.len(),
            sending: Sending::Whole,
        }
    }

    /// 200 with a body that never ends.
    pub fn endless() -> Self {
        Self {
            sending: Sending::Endless,
            ..Self::ok(b"")
        }
    }

    /// 200 with `body`, one byte every `every`.
    pub fn trickle(body: &[u8], every: Duration) -> Self {
        Self {
            sending: Sending::Trickle { every },
            ..Self::ok(body)
        }
    }

    /// No answer at all.
    pub fn silent() -> Self {
        Self {
            sending: Sending::Silent,
            ..Self::ok(b"")
        }
    }

    /// A `302 Found` to `location`.
    pub fn redirect(location: &str) -> Self {
        Self {
            status: 302,
            headers: vec![format!("Location: {location}")],
            body: vec![],
            content_length: 0,
            sending: Sending::Whole,
        }
    }

    /// A status with a short text body.
    pub fn status(status: u16, headers: &[&str]) -> Self {
        Self {
            status,
            headers: headers.iter().map(|h| h.to_string()).collect(),
            body: b"scripted failure".to_vec(),
            content_length: 16,
            sending: Sending::Whole,
        }
    }
}

type Routes = HashMap<String, Vec<Reply>>;

/// A scripted HTTP/1.1 server on loopback: each path answers its replies in order (the last one
/// repeats); a target with a query uses the route of its path when it has none of its own;
/// unknown paths get 404. Each connection is served on its own thread; at most 200
/// connections, then it stops by itself.
pub struct HttpServer {
    /// The port.
    pub port: u16,
    routes: Arc<Mutex<Routes>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    total: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Start serving.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let routes: Arc<Mutex<Routes>> = Arc::default();
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let total = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, h, t, s) = (routes.clone(), hits.clone(), total.clone(), stop.clone());
        let a = seen.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming().take(200) {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (r, h, t, s, a) = (r.clone(), h.clone(), t.clone(), s.clone(), a.clone());
                std::thread::spawn(move || serve(conn, &r, &h, &a, &t, &s));
            }
        });
        Self {
            port,
            routes,
            hits,
            seen,
            total,
            stop,
            thread: Some(thread),
        }
    }

    /// Answer `path` with `replies`, in order.
    pub fn route(&self, path: &str, replies: Vec<Reply>) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_string(), replies);
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Requests seen for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// The `Authorization` header of each request, with its path (and query), in arrival order
    /// (empty when there was none).
    pub fn authorizations(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests seen in all.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    mut conn: TcpStream,
    routes: &Mutex<Routes>,
    hits: &Mutex<HashMap<String, usize>>,
    seen: &Mutex<Vec<(String, String)>>,
    total: &AtomicUsize,
    stop: &AtomicBool,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() || request_line.is_empty() {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let mut content_length = 0usize;
    let mut authorization = String::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            authorization = h["authorization:".len()..].trim().to_string();
        }
    }
    let mut body = vec![0u8; content_length];
    let _ = reader.read_exact(&mut body);
    total.fetch_add(1, Ordering::SeqCst);
    seen.lock()
        .unwrap()
        .push((path.clone(), authorization.clone()));
    // A route for the exact target (path and query), else for the path alone.
    let path = {
        let routes = routes.lock().unwrap();
        let bare = path.split('?').next().unwrap_or("").to_string();
        if routes.contains_key(&path) || !routes.contains_key(&bare) {
            path
        } else {
            bare
        }
    };
    let n = {
        let mut h = hits.lock().unwrap();
        let e = h.entry(path.clone()).or_insert(0);
        *e += 1;
        *e
    };
    let reply = routes
        .lock()
        .unwrap()
        .get(&path)
        .and_then(|r| r.get(n - 1).or(r.last()).cloned())
        .unwrap_or_else(|| Reply::status(404, &[]));
    send_reply(&mut conn, &reply, &authorization, stop);
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// Write `reply` as its [`Sending`] says (bounded in bytes and time whatever the client does).
fn send_reply(conn: &mut TcpStream, reply: &Reply, authorization: &str, stop: &AtomicBool) {
    let length = match reply.sending {
        Sending::Endless => "Transfer-Encoding: chunked".to_string(),
        _ => format!("Content-Length: {}", reply.content_length),
    };
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\n{length}\r\nConnection: close\r\n",
        reply.status
    );
    for h in &reply.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    if reply.sending == Sending::Silent {
        for _ in 0..1200 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        return;
    }
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    match reply.sending {
        Sending::Whole => {
            let body = String::from_utf8_lossy(&reply.body);
            if body.contains("{authorization}") {
                let _ = conn.write_all(body.replace("{authorization}", authorization).as_bytes());
            } else {
                let _ = conn.write_all(&reply.body);
            }
        }
        Sending::Endless => {
            let chunk = vec![b'x'; 64 << 10];
            let frame = format!("{:x}\r\n", chunk.len());
            for _ in 0..(1u64 << 16) {
                let sent = conn.write_all(frame.as_bytes()).is_ok()
                    && conn.write_all(&chunk).is_ok()
                    && conn.write_all(b"\r\n").is_ok();
                if !sent || stop.load(Ordering::SeqCst) {
                    return;
                }
            }
        }
        Sending::Trickle { every } => {
            for b in &reply.body {
                if conn.write_all(&[*b]).is_err() || stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(every);
            }
        }
        Sending::Silent => {}
    }
}

/// One chat-completion request as the [`ChatServer`] saw it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// What the [`ChatServer`]'s policy answers: a status (200: `content` becomes the completion)
/// and the text (or error body).
pub type ChatPolicy = dyn Fn(usize, &serde_json::Value) -> (u16, String) + Send + Sync;

/// An OpenAI-compatible chat server on loopback (tiny_http, 8 worker threads): `POST
/// /v1/chat/completions` answers `{"choices":[{"message":{"role":"assistant","content":…},
/// "finish_reason":"stop"}], …}` with the text its policy returns for the request (numbered in
/// arrival order), or the policy's error status; `GET /v1/models` lists one model. It records
/// every request and the most requests it ever had in flight; each completion takes `delay`.
pub struct ChatServer {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl ChatServer {
    /// Serve `policy`, each completion taking `delay`.
    pub fn start(delay: Duration, policy: Box<ChatPolicy>) -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
        let peak = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let policy: Arc<ChatPolicy> = Arc::from(policy);
        let threads = (0..8)
            .map(|_| {
                let (server, seen, peak, in_flight, stop, policy) = (
                    server.clone(),
                    seen.clone(),
                    peak.clone(),
                    in_flight.clone(),
                    stop.clone(),
                    policy.clone(),
                );
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50))
                        else {
                            continue;
                        };
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        let (status, body) = chat_reply(&mut req, &seen, &*policy, delay);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        let json = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"application/json"[..],
                        )
                        .unwrap();
                        let _ = req.respond(
                            tiny_http::Response::from_string(body)
                                .with_status_code(status)
                                .with_header(json),
                        );
                    }
                })
            })
            .collect();
        Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            seen,
            peak,
            stop,
            threads,
        }
    }

    /// Every completion request so far, in arrival order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// The most completion requests that were in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn chat_reply(
    req: &mut tiny_http::Request,
    seen: &Mutex<Vec<SeenRequest>>,
    policy: &ChatPolicy,
    delay: Duration,
) -> (u16, String) {
    let url = req.url().to_string();
    if *req.method() == tiny_http::Method::Get && url == "/v1/models" {
        return (
            200,
            r#"{"object":"list","data":[{"id":"mock","object":"model"}]}"#.into(),
        );
    }
    if *req.method() != tiny_http::Method::Post || url != "/v1/chat/completions" {
        return (404, r#"{"error":{"message":"not found"}}"#.into());
    }
    let mut text = String::new();
    if req.as_reader().read_to_string(&mut text).is_err() {
        return (400, r#"{"error":{"message":"unreadable body"}}"#.into());
    }
    let Ok(body) = serde_json::from_str::<serde_json::Value>(&text) else {
        return (400, r#"{"error":{"message":"body is not JSON"}}"#.into());
    };
    let authorization = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.to_string());
    let n = {
        let mut s = seen.lock().unwrap();
        s.push(SeenRequest {
            authorization,
            body: body.clone(),
        });
        s.len() - 1
    };
    std::thread::sleep(delay);
    let (status, content) = policy(n, &body);
    if status != 200 {
        return (status, format!(r#"{{"error":{{"message":{content:?}}}}}"#));
    }
    let reply = serde_json::json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    });
    (200, reply.to_string())
}
