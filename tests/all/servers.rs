//! Real servers on loopback for the network tests, each stopped when dropped:
//!
//! - [`Registry`]: Debian's `docker-registry` (the CNCF distribution registry, `registry serve`)
//!   on a free port with its storage in a temp dir;
//! - [`HttpServer`]: a small HTTP/1.1 file server on `std::net` whose responses are scripted per
//!   path (status, body, a Content-Length that may promise more than it sends, headers), and
//!   which counts requests;
//! - [`LlamaServer`]: llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`)
//!   serving the default model's GGUF.
//!
//! A missing tool fails the test with the command that installs it (`scripts/setup.sh`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
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
        let up = wait_until(Duration::from_secs(20), || get_status(port, "/v2/") == Some(200));
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
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: &[u8]) -> Self {
        Self {
            status: 200,
            headers: vec![],
            body: body.to_vec(),
            content_length: body.len(),
        }
    }

    /// A status with a short text body.
    pub fn status(status: u16, headers: &[&str]) -> Self {
        Self {
            status,
            headers: headers.iter().map(|h| h.to_string()).collect(),
            body: b"scripted failure".to_vec(),
            content_length: 16,
        }
    }
}

type Routes = HashMap<String, Vec<Reply>>;

/// A scripted HTTP/1.1 server on loopback: each path answers its replies in order (the last one
/// repeats); unknown paths get 404. At most 200 connections, then it stops by itself.
pub struct HttpServer {
    /// The port.
    pub port: u16,
    routes: Arc<Mutex<Routes>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
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
        let total = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, h, t, s) = (routes.clone(), hits.clone(), total.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming().take(200) {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                serve(conn, &r, &h, &t);
            }
        });
        Self {
            port,
            routes,
            hits,
            total,
            stop,
            thread: Some(thread),
        }
    }

    /// Answer `path` with `replies`, in order.
    pub fn route(&self, path: &str, replies: Vec<Reply>) {
        self.routes.lock().unwrap().insert(path.to_string(), replies);
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
    total: &AtomicUsize,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
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
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; content_length];
    let _ = reader.read_exact(&mut body);
    total.fetch_add(1, Ordering::SeqCst);
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
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status, reply.content_length
    );
    for h in &reply.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&reply.body);
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// llama-cpp-python's server on a free port, serving the default model as `smollm2`.
pub struct LlamaServer {
    child: Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
}

impl LlamaServer {
    /// The Python with llama-cpp-python: `$RAGEN_GYM_LLAMA_PYTHON`, else the project venv's.
    pub fn python() -> PathBuf {
        std::env::var_os("RAGEN_GYM_LLAMA_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".venv/bin/python"))
    }

    /// Start it (2 threads, 2048-token context) and wait at most 120 s for `/v1/models`.
    pub fn start(gguf: &Path) -> Self {
        let port = free_port();
        let python = Self::python();
        let child = Command::new(&python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(gguf)
            .args([
                "--model_alias",
                "smollm2",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--n_ctx",
                "2048",
                "--n_threads",
                "2",
                "--verbose",
                "false",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {} -m llama_cpp.server ({e}); install llama-cpp-python with scripts/setup.sh", python.display())
            });
        let mut s = Self {
            child,
            base_url: format!("http://127.0.0.1:{port}/v1"),
        };
        let up = wait_until(Duration::from_secs(120), || {
            get_status(port, "/v1/models") == Some(200)
        });
        if !up {
            let status = s.child.try_wait().ok().flatten();
            stop(&mut s.child);
            panic!(
                "llama_cpp.server did not answer on port {port} within 120 s (exited: {status:?}); is llama-cpp-python[server] installed in {}? run scripts/setup.sh",
                python.display()
            );
        }
        s
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
