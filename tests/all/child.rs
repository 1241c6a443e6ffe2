//! `ragen-gym` as a child process under watch: its peak RSS (the kernel's high-water mark of the
//! child's own address space, `VmHWM` in `/proc/PID/status` (proc(5)), read every 10 ms while it
//! runs), killed when its resident memory passes a cap or it runs past a time limit, so a test
//! against a hostile server can neither exhaust this machine nor hang.
//!
//! Not `ru_maxrss` from `wait4(2)`: Linux carries the pre-`exec` high-water mark into it
//! (`exec_mmap` in fs/exec.c keeps the old address space's), and before `exec` the child is a copy
//! of this test process, which holds the models of the tests running beside it.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a watched run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Peak resident set size, MiB, as last polled (0 when it ended before the first poll).
    pub peak_rss_mib: f64,
    /// Wall time until it ended.
    pub elapsed: Duration,
    /// Why the watcher killed it (`"memory"` or `"time"`), if it did.
    pub killed: Option<&'static str>,
}

/// The `ragen-gym` binary next to this test binary (`cargo build -p ragen-gym` puts it there;
/// `cargo test --workspace` builds it).
pub fn cli() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let cli = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("ragen-gym"))
        .expect("target directory");
    assert!(
        cli.exists(),
        "{} is missing: build it first with `cargo build -p ragen-gym`",
        cli.display()
    );
    cli
}

/// The child's resident set size and its high-water mark, kB (`VmRSS`, `VmHWM` of
/// `/proc/PID/status`, read once); 0 once the process has exited.
fn memory_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS"), field("VmHWM"))
}

/// Run `ragen-gym args…` with `envs`, killing it once its RSS passes `rss_cap_mib` or it runs
/// longer than `limit`. Output beyond 1 MiB per stream is dropped.
pub fn run_watched(
    args: &[&str],
    envs: &[(&str, &str)],
    limit: Duration,
    rss_cap_mib: u64,
) -> Outcome {
    #[expect(clippy::zombie_processes, reason = "reaped by waitpid below")]
    let mut child = Command::new(cli())
        .args(args)
        .envs(envs.iter().copied())
        .env("RAGEN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ragen-gym");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut r).take(1 << 20).read_to_end(&mut buf);
            std::io::copy(&mut r, &mut std::io::sink()).ok();
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let pid = i32::try_from(child.id()).expect("pid");
    let start = Instant::now();
    let mut killed = None;
    let mut status = 0i32;
    // `spawn` returns after the child's `exec`, so every `VmHWM` read here is the new program's.
    let mut peak_kib = 0u64;
    loop {
        let (resident_kib, hwm_kib) = memory_kib(pid);
        peak_kib = peak_kib.max(hwm_kib);
        // SAFETY: `pid` is our own child, not yet reaped (std's `Child::wait` is never called);
        // `status` is valid for writes.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        assert!(
            r == 0,
            "waitpid failed: {}",
            std::io::Error::last_os_error()
        );
        if killed.is_none() {
            if resident_kib > rss_cap_mib << 10 {
                killed = Some("memory");
            } else if start.elapsed() > limit {
                killed = Some("time");
            }
            if killed.is_some() {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = start.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Outcome {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        peak_rss_mib: peak_kib as f64 / 1024.0,
        elapsed,
        killed,
    }
}
