//! The WebShop soak test: 5,000 episodes of the `webshop-bridge`
//! built-in in the sandbox, over the reqwest transport, against `ragen-gym webshop serve` in its
//! own process on 127.0.0.1, with 10% of the episodes ending by a trap or a timeout.
//!
//! * **Traps**: the sandbox runs with a per-call fuel budget of 20 M units (a normal bridge
//!   call uses under 0.1 M); every 20th episode the policy sends a 1 MiB action, which the
//!   bridge cannot even parse within that budget, so the call traps with `out of fuel`, the host
//!   discards the instance and the next reset runs on a fresh one. The discarded instance never
//!   closes its server session; the server's idle timeout (3 s here) does.
//! * **Timeouts**: the bridge reaches the server through a loopback proxy that forwards every
//!   request except those whose body holds `__soak_stall__`: it holds these for 2 s and then
//!   drops them, as a hung server would. Every 20th episode (offset by 10) the policy sends
//!   `search[__soak_stall__]`, and the bridge's call fails after the transport's 1 s timeout.
//! * The other episodes buy the first product found with its first option, or (every 10th)
//!   search until they are truncated at `max_turns`.
//!
//! Checked: every episode ends as planned; server sessions return to their baseline once the
//! envs are dropped and the idle timeout has passed; the resident memory of this process (the
//! host: sandbox, 8 envs, proxy) and of the server process grows by less than 10% between the
//! end of the warm-up (episode 500) and the end. Figures go to stderr.
//!
//! Run: `cargo build -p ragen-gym && cargo test -p ragen-gym-tests --test all webshop_soak --
//! --ignored --nocapture`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ragen_gym_core::{Env, EnvCallError, EnvError, PluginFailureKind};
use ragen_gym_sandbox::{Grants, HostPort, ReqwestTransport, Sandbox, SandboxConfig, WasmEnv};

use crate::webshop::bridge_declaring;

const EPISODES: usize = 5_000;
const WORKERS: usize = 8;
const WARM_UP: usize = 500;
const IDLE_TIMEOUT_S: u64 = 3;
const FUEL_PER_CALL: u64 = 20_000_000;
const TRANSPORT_TIMEOUT: Duration = Duration::from_secs(1);
const STALL: Duration = Duration::from_secs(2);
const STALL_MARK: &str = "__soak_stall__";

/// How an episode is planned to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Buy,
    Truncate,
    Trap,
    Timeout,
}

fn plan(episode: usize) -> Plan {
    match episode % 20 {
        3 => Plan::Trap,
        13 => Plan::Timeout,
        7 | 17 => Plan::Truncate,
        _ => Plan::Buy,
    }
}

/// How an episode did end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Terminated,
    Truncated,
    OutOfFuel,
    TimedOut,
    Unexpected(String),
}

/// `ragen-gym webshop serve` in its own process.
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

impl ServerProcess {
    fn start() -> Self {
        let cli = crate::child::cli();
        let mut child = Command::new(&cli)
            .args(["webshop", "serve", "--port", "0", "--idle-timeout"])
            .arg(IDLE_TIMEOUT_S.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ragen-gym webshop serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("the server prints its address")
                .expect("stderr line");
            if let Some(rest) = line.split_once(" on http://").map(|(_, r)| r) {
                let addr = rest.split_whitespace().next().expect("address");
                break addr.parse().expect("socket address");
            }
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, addr }
    }

    fn rss_kib(&self) -> u64 {
        rss_kib(&format!("/proc/{}/status", self.child.id()))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kib(status_file: &str) -> u64 {
    let status = std::fs::read_to_string(status_file).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// One plain HTTP/1.1 exchange; returns the response body.
fn http(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(out)
}

fn sessions(server: SocketAddr) -> usize {
    let reply = http(
        server,
        b"GET /list_envs HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n",
    )
    .expect("GET /list_envs");
    let text = String::from_utf8_lossy(&reply);
    let body = text.split_once("\r\n\r\n").expect("http response").1;
    serde_json::from_str::<Vec<i64>>(body)
        .expect("list of env ids")
        .len()
}

/// Read one request (head and `Content-Length` body) from a client.
fn read_request(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Ok(buf);
            }
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A loopback proxy to `upstream` that holds, then drops, requests carrying [`STALL_MARK`].
struct StallProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stalled: Arc<AtomicUsize>,
}

impl StallProxy {
    fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let stop = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicUsize::new(0));
        let (stop2, stalled2) = (stop.clone(), stalled.clone());
        std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let stalled = stalled2.clone();
                        std::thread::spawn(move || proxy_one(client, upstream, &stalled));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("proxy accept: {e}"),
                }
            }
        });
        Self {
            addr,
            stop,
            stalled,
        }
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn proxy_one(mut client: TcpStream, upstream: SocketAddr, stalled: &AtomicUsize) {
    let _ = client.set_nonblocking(false);
    let Ok(request) = read_request(&mut client) else {
        return;
    };
    if request
        .windows(STALL_MARK.len())
        .any(|w| w == STALL_MARK.as_bytes())
    {
        stalled.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(STALL);
        return; // dropped: the client has timed out by now
    }
    // Forward with `Connection: close`, so that the response ends at EOF.
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let head = String::from_utf8_lossy(&request[..end]);
    let mut forwarded: String = head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    forwarded.push_str("Connection: close\r\n\r\n");
    let mut bytes = forwarded.into_bytes();
    bytes.extend_from_slice(&request[end + 4..]);
    if let Ok(response) = http(upstream, &bytes) {
        let _ = client.write_all(&response);
    }
}

/// Play one episode of `plan` on `env`.
fn play(env: &mut WasmEnv, episode: usize, plan: Plan) -> Ending {
    let unexpected =
        |what: &str, e: &dyn std::fmt::Debug| Ending::Unexpected(format!("{what}: {e:?}"));
    let first = match env.reset(episode as u64) {
        Ok(r) => r,
        Err(e) => return unexpected("reset", &e),
    };
    let instruction = first
        .observation
        .split(" [SEP] ")
        .nth(2)
        .unwrap_or("shirt")
        .to_string();
    let mut observation = first.observation;
    let max_turns = env.spec().max_episode_steps as usize;
    for turn in 0..max_turns {
        let listed: Vec<String> = observation
            .rsplit_once("\nAvailable actions: ")
            .map(|(_, a)| a.split(", ").map(String::from).collect())
            .unwrap_or_default();
        let action = match (plan, turn) {
            (_, 0) => format!("search[{instruction}]"),
            (Plan::Trap, _) => format!("click[{}]", "a".repeat(1 << 20)),
            (Plan::Timeout, _) => format!("search[{STALL_MARK}]"),
            (Plan::Truncate, _) => format!("search[{instruction} {turn}]"),
            (Plan::Buy, _) => {
                let product = listed.iter().find(|a| a.starts_with("click[b0"));
                let option = listed.iter().find(|a| {
                    a.starts_with("click[")
                        && ![
                            "click[back to search]",
                            "click[< prev]",
                            "click[description]",
                            "click[features]",
                            "click[reviews]",
                            "click[buy now]",
                        ]
                        .contains(&a.as_str())
                });
                match (product, option) {
                    (Some(p), _) => p.clone(),
                    (None, Some(o)) if turn < 3 => o.clone(),
                    _ => "click[buy now]".to_string(),
                }
            }
        };
        match env.step(&action) {
            Ok(step) => {
                observation = step.observation;
                if step.terminated {
                    return Ending::Terminated;
                }
                if step.truncated {
                    return Ending::Truncated;
                }
            }
            Err(EnvCallError::Plugin(f)) if f.kind == PluginFailureKind::OutOfFuel => {
                return Ending::OutOfFuel;
            }
            Err(EnvCallError::Env {
                error: EnvError::Other(m),
                ..
            }) if m.contains("timed out") => return Ending::TimedOut,
            Err(e) => return unexpected(&format!("step {action:.40}"), &e),
        }
    }
    Ending::Unexpected(format!("no end after {max_turns} turns"))
}

#[derive(Debug, Default)]
struct Tally {
    terminated: usize,
    truncated: usize,
    traps: usize,
    timeouts: usize,
    unexpected: Vec<String>,
}

#[test]
#[ignore = "soak: 5,000 episodes for a few minutes; run with --ignored (see the module doc)"]
fn soak_5000_webshop_episodes_with_traps_and_timeouts() {
    let started = Instant::now();
    let server = ServerProcess::start();
    let proxy = StallProxy::start(server.addr);
    let baseline = sessions(server.addr);

    let transport = ReqwestTransport::new(TRANSPORT_TIMEOUT, 1 << 20).expect("http client");
    let sandbox = Sandbox::builder()
        .config(SandboxConfig {
            fuel_per_call: FUEL_PER_CALL,
            ..SandboxConfig::default()
        })
        .http_transport(Arc::new(transport))
        .build()
        .expect("sandbox");
    let target = proxy.addr.to_string();
    let plugin = sandbox
        .load_bytes(
            "webshop-bridge (soak)",
            &bridge_declaring(std::slice::from_ref(&target)),
        )
        .expect("load bridge");
    let config = format!(r#"{{"server":"{target}","split":"train","max_turns":9}}"#);
    let envs: Vec<WasmEnv> = (0..WORKERS)
        .map(|_| {
            WasmEnv::new(
                &plugin,
                &config,
                Grants {
                    http: vec![HostPort::parse(&target).unwrap()],
                    ..Grants::default()
                },
            )
            .expect("new env")
        })
        .collect();

    // Each worker takes the next episode, so hostile episodes spread over every env.
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let workers: Vec<_> = envs
        .into_iter()
        .map(|mut env| {
            let (next, done, tally) = (next.clone(), done.clone(), tally.clone());
            std::thread::spawn(move || {
                loop {
                    let episode = next.fetch_add(1, Ordering::SeqCst);
                    if episode >= EPISODES {
                        break;
                    }
                    let planned = plan(episode);
                    let ending = play(&mut env, episode, planned);
                    let mut t = tally.lock().unwrap();
                    match (planned, ending) {
                        (Plan::Buy, Ending::Terminated) => t.terminated += 1,
                        (Plan::Truncate, Ending::Truncated) => t.truncated += 1,
                        (Plan::Trap, Ending::OutOfFuel) => t.traps += 1,
                        (Plan::Timeout, Ending::TimedOut) => t.timeouts += 1,
                        (p, e) => t
                            .unexpected
                            .push(format!("episode {episode} ({p:?}): {e:?}")),
                    }
                    drop(t);
                    done.fetch_add(1, Ordering::SeqCst);
                }
                env
            })
        })
        .collect();

    // Sample sessions and memory while the workers run.
    let mut peak_sessions = 0;
    let mut warm = None;
    let mut series = Vec::new();
    while done.load(Ordering::SeqCst) < EPISODES {
        std::thread::sleep(Duration::from_millis(250));
        peak_sessions = peak_sessions.max(sessions(server.addr));
        let finished = done.load(Ordering::SeqCst);
        let rss = (rss_kib("/proc/self/status"), server.rss_kib());
        if warm.is_none() && finished >= WARM_UP {
            warm = Some((rss.0, rss.1, started.elapsed()));
        }
        if finished >= (series.len() + 1) * EPISODES / 10 {
            series.push(format!("{finished}: {}/{}", rss.0, rss.1));
        }
    }
    let envs: Vec<WasmEnv> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();
    let episodes_wall = started.elapsed();
    let (host_end, server_end) = (rss_kib("/proc/self/status"), server.rss_kib());
    let sessions_at_end = sessions(server.addr);
    let instances: u64 = envs.iter().map(|e| e.stats().instances).sum();
    let plugin_errors: u64 = envs.iter().map(|e| e.stats().plugin_errors).sum();
    drop(envs);
    std::thread::sleep(Duration::from_secs(IDLE_TIMEOUT_S) + Duration::from_millis(1500));
    let sessions_after = sessions(server.addr);

    let t = tally.lock().unwrap();
    let (host_warm, server_warm, warm_at) = warm.expect("warm-up sample");
    let growth = |a: u64, b: u64| (b as f64 - a as f64) / a as f64 * 100.0;
    eprintln!(
        "webshop soak: {EPISODES} episodes in {:.1} s ({WORKERS} envs; warm-up done at {:.1} s)\n\
         endings: {} bought, {} truncated, {} traps (out of fuel), {} timeouts, {} unexpected\n\
         proxy stalled {} requests; env instances {instances}, plugin errors {plugin_errors}\n\
         sessions: baseline {baseline}, peak {peak_sessions}, at the end {sessions_at_end}, \
         {:.1} s after the envs were dropped {sessions_after}\n\
         host RSS {host_warm} KiB at warm-up -> {host_end} KiB at the end ({:+.1}%)\n\
         server RSS {server_warm} KiB at warm-up -> {server_end} KiB at the end ({:+.1}%)\n\
         RSS along the run (episodes: host/server KiB): {}\n\
         total wall time {:.1} s",
        episodes_wall.as_secs_f64(),
        warm_at.as_secs_f64(),
        t.terminated,
        t.truncated,
        t.traps,
        t.timeouts,
        t.unexpected.len(),
        proxy.stalled.load(Ordering::SeqCst),
        IDLE_TIMEOUT_S as f64 + 1.5,
        growth(host_warm, host_end),
        growth(server_warm, server_end),
        series.join(", "),
        started.elapsed().as_secs_f64(),
    );
    assert!(
        t.unexpected.is_empty(),
        "{:#?}",
        &t.unexpected[..t.unexpected.len().min(20)]
    );
    assert_eq!(
        t.traps + t.timeouts,
        EPISODES / 10,
        "10% end by trap or timeout"
    );
    assert_eq!(t.terminated + t.truncated + t.traps + t.timeouts, EPISODES);
    assert_eq!(sessions_after, baseline, "sessions back to their baseline");
    assert!(
        growth(host_warm, host_end) < 10.0,
        "host RSS grew {host_warm} -> {host_end} KiB"
    );
    assert!(
        growth(server_warm, server_end) < 10.0,
        "server RSS grew {server_warm} -> {server_end} KiB"
    );
}
