//! What a hostile plugin can reach through WASI and the host imports (`docs/architecture.md` §5,
//! "Sandbox rules"): no files, environment, arguments or sockets; clocks and randomness that are
//! virtual and seeded, so runs repeat; log lines capped per call and counted; HTTP only where the
//! manifest declares a host and the user grants it; and the counters a rollout reports as
//! `sandbox/*` metrics. (Split from `sandbox_hostile.rs`, whose helpers it uses.)

use crate::sandbox_hostile::{env, hostile, hostile_bytes};
use ragen_gym_core::Env;
use ragen_gym_sandbox::{
    Grants, HostPort, HttpError, HttpRequest, HttpResponse, HttpTransport, Sandbox, SandboxConfig,
    WasmEnv,
};
use ragen_gym_starpo::metrics::sandbox_metrics;
use ragen_gym_starpo::testing::ScriptedGenerator;
use ragen_gym_starpo::{Config, EnvPool, Metrics, RolloutParams, rollout};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn no_files_env_vars_args_or_sockets() {
    let obs = |mode: &str| env(mode).reset(0).unwrap().observation;
    assert!(obs("file").starts_with("denied"), "{}", obs("file"));
    assert_eq!(obs("env"), "vars=0 args=0");
    assert!(obs("socket").starts_with("denied"), "{}", obs("socket"));
}

#[test]
fn clocks_and_randomness_are_deterministic_and_seeded() {
    // The deterministic wall clock starts at 2000-01-01T00:00:00Z.
    assert_eq!(env("clock").reset(0).unwrap().observation, "now=946684800");
    // std's HashMap keys come from WASI's per-instance `insecure-seed`: fixed by the host, so two
    // fresh instances hash alike (with real randomness they would differ).
    let rand = |seed| env("random").reset(seed).unwrap().observation;
    assert_eq!(rand(7), rand(7));
    assert_eq!(rand(7), rand(8));
    // WASI `random` is seeded by every reset: splitmix64 from state `seed`, whose first outputs
    // for 7 and 8 are 7191089600892374487 and 11409396526365357622 (computed separately with
    // Python integers). Same seed, same value, on one instance or a fresh one; another seed,
    // another value.
    let mut e = env("getrandom");
    let mut draw = |seed| e.reset(seed).unwrap().observation;
    assert_eq!(draw(7), "u64=7191089600892374487");
    assert_eq!(draw(8), "u64=11409396526365357622");
    assert_eq!(draw(7), "u64=7191089600892374487");
    assert_eq!(
        env("getrandom").reset(8).unwrap().observation,
        "u64=11409396526365357622"
    );
}

/// The guest's figure after `prefix` in `obs` (e.g. "slept 30000 ms" -> 30000).
fn figure(obs: &str, prefix: &str) -> u64 {
    obs.split(prefix)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix:?} in {obs:?}"))
}

#[test]
fn a_sleeping_guest_never_waits_on_the_real_clock() {
    // On the real clock a 30 s sleep returned after 30 s of real time (then "deadline exceeded"),
    // and a longer one hung the CLI. Now a sleep advances virtual time at once.
    for secs in [30u64, 3600] {
        let started = std::time::Instant::now();
        let obs = env(&format!("sleep:{secs}")).reset(0).unwrap().observation;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{secs} s: {:?}",
            started.elapsed()
        );
        // The guest saw the whole sleep pass, plus the virtual time of the fuel its own code
        // burnt (1 ns per unit, far under a millisecond here).
        let ms = figure(&obs, "slept ");
        assert!(
            (secs * 1000..secs * 1000 + 10).contains(&ms),
            "{secs} s: {obs}"
        );
    }
}

#[test]
fn readiness_checks_count_the_same_on_every_run() {
    // On the real clock the count of non-blocking checks of a 1 ms timer changed on every run.
    let count = |seed| {
        figure(
            &env("ready-count").reset(seed).unwrap().observation,
            "checks ",
        )
    };
    let first = count(1);
    assert!(first > 0);
    assert_eq!(count(1), first);
    assert_eq!(
        count(2),
        first,
        "the count does not depend on the seed either"
    );
    let mut e = env("ready-count");
    assert_eq!(figure(&e.reset(1).unwrap().observation, "checks "), first);
    assert_eq!(figure(&e.reset(1).unwrap().observation, "checks "), first);
    // Without fuel every reading or check advances the clock 1 µs: the timer is armed at
    // 1 µs (the subscribe reading) for 1 ms, so it is due at 1,001 µs, and check k reads
    // (1 + k) µs: checks 1..=999 say "not ready", the 1,000th says ready. 999 exactly.
    let sb = Sandbox::new(SandboxConfig {
        fuel: false,
        cache_dir: None,
        max_instances: 4,
        ..SandboxConfig::default()
    })
    .unwrap();
    let p = sb.load_bytes("hostile.wasm", &hostile_bytes()).unwrap();
    let mut e = WasmEnv::new(&p, "ready-count", Grants::default()).unwrap();
    assert_eq!(e.reset(0).unwrap().observation, "checks 999");
    assert_eq!(e.reset(5).unwrap().observation, "checks 999");
}

#[test]
fn every_clock_and_poll_entry_point_runs_on_virtual_time() {
    let started = std::time::Instant::now();
    let obs = env("clocks").reset(0).unwrap().observation;
    assert!(started.elapsed() < Duration::from_secs(2));
    // Resolutions of 1 ns; the wall clock at its origin, 2000-01-01T00:00:00Z; the poll over
    // a 10 ms duration and a 5 ms instant fires the 5 ms one (index 1) only; `block` on the
    // 10 ms one returns once it is due; an instant in the past is ready at once.
    assert!(
        obs.starts_with(
            "wall_res=0.000000001 wall_secs=946684800 mono_res=1 fired=[1] five_ready=true \
             ten_ready=false ten_ready_after_block=true past_ready=true "
        ),
        "{obs}"
    );
    // The poll returned when 5 ms of virtual time had passed, the block at 10 ms, plus the
    // fuel burnt in between (1 ns per unit, well under 0.1 ms).
    let poll = figure(&obs, "poll_ns=");
    let block = figure(&obs, "block_ns=");
    assert!((5_000_000..5_100_000).contains(&poll), "{obs}");
    assert!((10_000_000..10_100_000).contains(&block), "{obs}");
    // Deterministic: the same on a fresh instance and after another reset.
    let mut e = env("clocks");
    assert_eq!(e.reset(0).unwrap().observation, obs);
    assert_eq!(e.reset(9).unwrap().observation, obs);
}

#[test]
fn log_lines_beyond_the_cap_are_dropped_and_counted() {
    let mut e = env("log-flood");
    assert_eq!(e.reset(0).unwrap().observation, "logged");
    assert_eq!(e.stats().log_dropped, 10_000 - 64);
}

#[test]
fn a_rollout_reports_what_its_envs_counted_as_sandbox_metrics() {
    // One env per counter: a well-behaved one; a NaN reward at `step` (refused output: a plugin
    // error, the instance discarded, a fresh one at the next reset); 10,000 log lines at `reset`
    // (64 kept); an undeclared HTTP request at `reset` (denied). Every answer is `Go`.
    let envs: Vec<Box<dyn Env>> = ["", "nan", "log-flood", "http-undeclared"]
        .into_iter()
        .map(|mode| Box::new(env(mode)) as Box<dyn Env>)
        .collect();
    let mut pool = EnvPool::new(envs);
    let p = RolloutParams::from_config(&Config::default_config(), pool.spec(), 1.0, 0);
    let seeds = [(0, 1), (1, 2), (2, 3), (3, 4)];
    let mut generator = ScriptedGenerator::fixed("</think><answer>Go</answer>");
    let mut rollout_span = || {
        let before = pool.stats();
        let t = rollout(&mut pool, &seeds, &mut generator, &p, &mut |_| {}).unwrap();
        (t, sandbox_metrics(&pool.stats().since(&before)))
    };
    let counts = |m: &Metrics| {
        ["instances", "plugin_errors", "http_denied", "log_dropped"]
            .map(|k| m[&format!("sandbox/{k}")])
    };
    let (t, m) = rollout_span();
    assert!(
        t[1].end_reason
            .as_deref()
            .unwrap()
            .contains("reward is NaN")
    );
    assert!([0, 2, 3].iter().all(|&i| t[i].end_reason.is_none()));
    // the instances were built before the rollout; one step failed
    assert_eq!(counts(&m), [0.0, 1.0, 1.0, (10_000 - 64) as f64]);
    assert!(m["sandbox/fuel_used"] > 0.0, "{m:?}");
    // the second rollout replaces the discarded instance at its reset, then fails again
    let (_, m) = rollout_span();
    assert_eq!(counts(&m), [1.0, 1.0, 1.0, (10_000 - 64) as f64]);
    assert!(m["sandbox/fuel_used"] > 0.0, "{m:?}");
}

struct FakeTransport;
impl HttpTransport for FakeTransport {
    fn fetch(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        assert_eq!(req.url, "http://127.0.0.1:9/x");
        Ok(HttpResponse {
            status: 200,
            headers: vec![],
            body: b"hi".to_vec(),
        })
    }
}

#[test]
fn http_needs_declaration_and_grant_on_every_call() {
    let grant = Grants {
        http: vec![HostPort::parse("127.0.0.1:9").unwrap()],
        ..Grants::default()
    };
    // Undeclared target: denied even when the user grants everything the manifest lists.
    let mut e = WasmEnv::new(&hostile(), "http-undeclared", grant.clone()).unwrap();
    let obs = e.reset(0).unwrap().observation;
    assert!(
        obs.starts_with("denied: example.com:80 is not declared"),
        "{obs}"
    );
    assert_eq!(e.stats().http_denied, 1);
    // Declared but not granted.
    let mut e = WasmEnv::new(&hostile(), "http-declared", Grants::default()).unwrap();
    let obs = e.reset(0).unwrap().observation;
    assert!(
        obs.starts_with("denied: 127.0.0.1:9 is not granted"),
        "{obs}"
    );
    // Declared and granted, no transport in this sandbox: a transport error.
    let mut e = WasmEnv::new(&hostile(), "http-declared", grant.clone()).unwrap();
    assert!(e.reset(0).unwrap().observation.starts_with("transport:"));
    // With a transport plugged in, the request goes through.
    let sb = Sandbox::builder()
        .config(SandboxConfig {
            cache_dir: None,
            max_instances: 4,
            ..SandboxConfig::default()
        })
        .http_transport(Arc::new(FakeTransport))
        .build()
        .unwrap();
    let p = sb.load_bytes("hostile.wasm", &hostile_bytes()).unwrap();
    assert_eq!(
        WasmEnv::new(&p, "http-declared", grant)
            .unwrap()
            .reset(0)
            .unwrap()
            .observation,
        "status 200"
    );
}
