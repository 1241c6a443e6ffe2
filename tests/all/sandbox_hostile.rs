//! The hostile plugin suite (`docs/architecture.md` §4 and §5): every misbehaviour gets its own
//! typed error, the process stays up, and a well-behaved env running beside it is unaffected. Also
//! covers the capability gate as seen by a guest, deterministic WASI, log caps, verification
//! without running, the compiled-code cache and reward-function plugins.

use ragen_gym_core::{
    Env, EnvCallError, PluginFailureKind, RewardBreakdown, RewardError, RewardFunction, Trajectory,
    Turn,
};
use ragen_gym_sandbox::{
    Grants, HostPort, HttpError, HttpRequest, HttpResponse, HttpTransport, LoadError, Plugin,
    Sandbox, SandboxConfig, WasmEnv, WasmRewardFunction, inspect_bytes, sha256_hex,
};
use ragen_gym_starpo::metrics::sandbox_metrics;
use ragen_gym_starpo::testing::ScriptedGenerator;
use ragen_gym_starpo::{Config, EnvPool, Metrics, RolloutParams, rollout};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub(crate) fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

pub(crate) fn hostile_bytes() -> Vec<u8> {
    fixture(env!("FIXTURE_HOSTILE"))
}

/// One sandbox for the suite: fuel on, 1e9 fuel per call (~100 ms of a tight loop; enough to build a 100 MB string), 160 MiB
/// memory cap (room for the 100 MB observation, not for 2 GiB), 1 MiB output cap, in-memory cache only.
pub(crate) fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            fuel_per_call: 1_000_000_000,
            memory_bytes: 160 << 20,
            cache_dir: None,
            max_instances: 64,
            ..SandboxConfig::default()
        })
        .expect("sandbox")
    })
}

pub(crate) fn hostile() -> Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| {
        sandbox()
            .load_bytes("hostile.wasm", &hostile_bytes())
            .expect("hostile loads")
    })
    .clone()
}

pub(crate) fn env(mode: &str) -> WasmEnv {
    WasmEnv::new(&hostile(), mode, Grants::default()).expect("hostile env")
}

/// A well-behaved env (the hostile plugin in mode "") beside the hostile one: must keep working.
pub(crate) fn assert_neighbour_ok(neighbour: &mut WasmEnv) {
    assert_eq!(
        neighbour.reset(5).expect("neighbour reset").observation,
        "ok"
    );
    let r = neighbour.step("Go").expect("neighbour step");
    assert!(r.action_is_valid && r.terminated);
}

pub(crate) fn reset_kind(mode: &str) -> (PluginFailureKind, String) {
    let mut neighbour = env("");
    assert_neighbour_ok(&mut neighbour);
    let mut e = env(mode);
    let err = match e.reset(1) {
        Err(EnvCallError::Plugin(p)) => p,
        other => panic!(
            "mode {mode}: expected a plugin error, got {:?}",
            other.map(|r| r.observation.len())
        ),
    };
    let msg = err.to_string();
    assert!(
        msg.starts_with("from plugin \"hostile/Hostile-v0\" 0.1.0: "),
        "{msg}"
    );
    // The instance is gone: stepping now is a typed not-ready error, not a crash.
    assert!(matches!(e.step("Go"), Err(EnvCallError::Env { .. })));
    assert_neighbour_ok(&mut neighbour);
    (err.kind, msg)
}

#[test]
fn infinite_loop_runs_out_of_fuel() {
    assert_eq!(reset_kind("loop").0, PluginFailureKind::OutOfFuel);
}

#[test]
fn infinite_loop_hits_the_deadline_without_fuel() {
    let sb = Sandbox::new(SandboxConfig {
        fuel: false,
        call_deadline: Duration::from_millis(200),
        cache_dir: None,
        max_instances: 8,
        ..SandboxConfig::default()
    })
    .unwrap();
    let p = sb.load_bytes("hostile.wasm", &hostile_bytes()).unwrap();
    let mut e = WasmEnv::new(&p, "loop", Grants::default()).unwrap();
    let started = std::time::Instant::now();
    match e.reset(0) {
        Err(EnvCallError::Plugin(p)) => assert_eq!(p.kind, PluginFailureKind::Deadline, "{p}"),
        other => panic!("expected deadline, got {:?}", other.is_ok()),
    }
    // The epoch ticker has 10 ms granularity: the call stops soon after 200 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn two_gib_allocation_is_out_of_memory() {
    let (kind, msg) = reset_kind("alloc");
    assert_eq!(kind, PluginFailureKind::OutOfMemory, "{msg}");
    assert!(msg.contains("160 MiB"), "{msg}");
}

#[test]
fn deep_recursion_is_a_stack_overflow() {
    assert_eq!(reset_kind("recurse").0, PluginFailureKind::StackOverflow);
}

#[test]
fn panic_carries_its_message() {
    let (kind, msg) = reset_kind("panic");
    assert_eq!(kind, PluginFailureKind::Panic);
    assert!(msg.contains("hostile plugin panicked on purpose"), "{msg}");
}

#[test]
fn output_caps_hold_at_the_cap_and_refuse_one_more() {
    // Exactly the 1 MiB cap: accepted. One byte more: refused, naming the field and the cap.
    let cap = sandbox().config().max_output_bytes;
    assert_eq!(
        env(&format!("obs:{cap}"))
            .reset(0)
            .unwrap()
            .observation
            .len(),
        cap
    );
    let (kind, msg) = reset_kind(&format!("obs:{}", cap + 1));
    assert_eq!(kind, PluginFailureKind::BadOutput);
    assert!(
        msg.ends_with("observation is 1048577 bytes, over the cap of 1048576"),
        "{msg}"
    );
}

#[test]
fn memory_cap_holds_at_the_cap_and_refuses_one_more_page() {
    let cap = 160u64 << 20;
    assert_eq!(
        env(&format!("grow-to:{cap}")).reset(0).unwrap().observation,
        format!("memory {cap}")
    );
    let (kind, msg) = reset_kind(&format!("grow-to:{}", cap + 65536));
    assert_eq!(kind, PluginFailureKind::OutOfMemory);
    assert!(msg.contains("beyond the cap of 160 MiB"), "{msg}");
}

/// A sandbox with `fuel_per_call` units per call (compiled code comes from `dir`).
fn fuel_sandbox(fuel_per_call: u64, dir: &std::path::Path) -> Plugin {
    Sandbox::new(SandboxConfig {
        fuel_per_call,
        cache_dir: Some(dir.to_path_buf()),
        max_instances: 4,
        ..SandboxConfig::default()
    })
    .unwrap()
    .load_bytes("hostile.wasm", &hostile_bytes())
    .unwrap()
}

#[test]
fn fuel_budgets_hold_at_the_budget_and_refuse_one_unit_less() {
    // Fuel is deterministic: measure what instantiation, `spec` and `reset` take, then run with
    // budgets of exactly that and one unit less.
    let dir = tempfile::tempdir().unwrap();
    let big = fuel_sandbox(1_000_000_000, dir.path());
    let first = WasmEnv::new(&big, "", Grants::default()).unwrap();
    // A second env of the same plugin and config reuses the spec: instantiation only.
    let mut second = WasmEnv::new(&big, "", Grants::default()).unwrap();
    let instantiate = second.stats().fuel_used;
    let spec = first.stats().fuel_used - instantiate;
    second.reset(3).unwrap();
    let reset = second.stats().fuel_used - instantiate;
    assert!(spec > 0 && reset > 0 && instantiate > 0);
    // The call that needs the most fuel decides the boundary of a plain call.
    let (budget, call) = if spec >= reset {
        (spec, "spec")
    } else {
        (reset, "reset")
    };
    let calls = ragen_gym_sandbox::limits::INSTANTIATE_FUEL_CALLS;
    assert!(
        instantiate <= (budget - 1) * calls,
        "{instantiate} {budget}"
    );
    let run = |fuel| -> Result<(), ragen_gym_core::PluginFailure> {
        let p = fuel_sandbox(fuel, dir.path());
        let mut e = WasmEnv::new(&p, "", Grants::default()).map_err(plugin_failure)?;
        e.reset(3).map_err(plugin_failure)?;
        Ok(())
    };
    run(budget).unwrap();
    // wasmtime checks fuel where Cranelift puts a check (function entries, loop heads), so the
    // units a call burns after its last check are charged but never refused: the boundary is
    // the fuel at that last check, a little under the measured use (3,485 of 3,607 for the
    // hostile plugin's `spec`). The boundary is sharp and deterministic: one unit more runs,
    // and the failing budget fails again, naming its own budget and the call.
    let failing = (budget / 2..budget)
        .rev()
        .find(|&f| run(f).is_err())
        .expect("some budget under the measured use fails");
    eprintln!("{call}: uses {budget} fuel units, largest failing budget {failing}");
    assert!(budget - failing <= 256, "{budget} {failing}");
    run(failing + 1).unwrap();
    let f = run(failing).unwrap_err();
    assert_eq!(f.kind, PluginFailureKind::OutOfFuel, "{f}");
    assert_eq!(
        f.message,
        format!("used its budget of {failing} fuel units for {call}")
    );
    // Instantiation gets INSTANTIATE_FUEL_CALLS budgets, and its failure states that total
    // (it used to state one call's budget while running with four).
    let short = instantiate / calls / 2;
    let f = run(short).unwrap_err();
    assert_eq!(f.kind, PluginFailureKind::OutOfFuel, "{f}");
    assert_eq!(
        f.message,
        format!(
            "used its budget of {} fuel units for instantiation (start code and constructor)",
            short * calls
        )
    );
}

fn plugin_failure(e: EnvCallError) -> ragen_gym_core::PluginFailure {
    match e {
        EnvCallError::Plugin(f) => f,
        other => panic!("expected a plugin failure, got {other}"),
    }
}

#[test]
fn zero_fuel_is_refused_and_fuel_can_be_off() {
    match Sandbox::new(SandboxConfig {
        fuel_per_call: 0,
        cache_dir: None,
        max_instances: 4,
        ..SandboxConfig::default()
    }) {
        Err(e @ LoadError::InvalidConfig { .. }) => {
            assert!(e.to_string().contains("`fuel_per_call`"), "{e}")
        }
        other => panic!("expected InvalidConfig, got {:?}", other.err()),
    }
    let sb = Sandbox::new(SandboxConfig {
        fuel: false,
        fuel_per_call: 0,
        cache_dir: None,
        max_instances: 4,
        ..SandboxConfig::default()
    })
    .unwrap();
    let p = sb.load_bytes("hostile.wasm", &hostile_bytes()).unwrap();
    let mut e = WasmEnv::new(&p, "", Grants::default()).unwrap();
    assert_eq!(e.reset(0).unwrap().observation, "ok");
    assert_eq!(e.stats().fuel_used, 0);
}

#[test]
fn a_plugin_whose_minimum_memory_is_over_its_cap_is_refused_at_load() {
    let bytes = hostile_bytes();
    let min = inspect_bytes("hostile.wasm", &bytes)
        .unwrap()
        .min_memory_bytes;
    // A Rust guest starts with at least one 64 KiB page, and in whole pages.
    assert!(min >= 65536 && min.is_multiple_of(65536), "{min}");
    let with_cap = |memory_bytes| {
        Sandbox::new(SandboxConfig {
            memory_bytes,
            cache_dir: None,
            max_instances: 4,
            ..SandboxConfig::default()
        })
        .unwrap()
        .load_bytes("hostile.wasm", &bytes)
    };
    assert!(with_cap(min).is_ok());
    match with_cap(min - 1) {
        Err(e @ LoadError::MemoryOverCap { .. }) => assert_eq!(
            e.to_string(),
            format!(
                "plugin hostile/Hostile-v0 0.1.0 needs at least {min} bytes of linear memory, \
                 over its memory cap of {} bytes",
                min - 1
            )
        ),
        other => panic!("expected MemoryOverCap, got {:?}", other.err()),
    }
}

fn mismatch() -> Plugin {
    sandbox()
        .load_bytes("mismatch.wasm", &fixture(env!("FIXTURE_MISMATCH")))
        .expect("mismatch loads")
}

#[test]
fn a_manifest_lowers_the_hosts_limits_and_never_raises_them() {
    let p = mismatch();
    // Manifest: 500 M fuel (host 1 G) and 1 TiB memory (host 160 MiB).
    assert_eq!(p.info().manifest.limits.fuel_per_call, Some(500_000_000));
    assert_eq!(p.fuel_per_call(), 500_000_000);
    assert_eq!(p.memory_bytes(), 160 << 20);
    // And the hostile plugin, without manifest limits, gets the host's.
    assert_eq!(hostile().fuel_per_call(), 1_000_000_000);
    assert_eq!(hostile().memory_bytes(), 160 << 20);
}

#[test]
fn a_spec_that_disagrees_with_the_manifest_is_refused_naming_both() {
    match WasmEnv::new(&mismatch(), "", Grants::default()) {
        Err(EnvCallError::Plugin(f)) => {
            assert_eq!(f.kind, PluginFailureKind::IdentityMismatch);
            assert_eq!(
                f.to_string(),
                "from plugin \"mismatch/Other-v0\" 0.2.0: reports another identity than its \
                 manifest: spec() reports id \"mismatch/Mismatch-v0\" version \"0.1.0\", the \
                 manifest declares id \"mismatch/Other-v0\" version \"0.2.0\""
            );
        }
        other => panic!("expected IdentityMismatch, got {:?}", other.is_ok()),
    }
}

#[test]
fn nan_reward_is_refused_and_the_env_recovers() {
    let mut e = env("nan");
    e.reset(0).unwrap();
    match e.step("Go") {
        Err(EnvCallError::Plugin(p)) => {
            assert_eq!(p.kind, PluginFailureKind::BadOutput);
            assert!(p.message.contains("reward is NaN"), "{p}");
        }
        other => panic!("expected bad output, got {:?}", other.map(|r| r.reward)),
    }
    // Next reset makes a fresh instance from the InstancePre.
    assert_eq!(e.reset(0).unwrap().observation, "ok");
    assert_eq!(e.stats().instances, 2);
    assert_eq!(e.stats().plugin_errors, 1);
}

#[test]
fn wrong_interface_major_version_names_both_versions() {
    let mut bytes = hostile_bytes();
    let from = format!(
        r#""interface_version":"{}""#,
        ragen_gym_core::INTERFACE_VERSION
    );
    let from = from.as_bytes();
    let to = br#""interface_version":"9.0.0""#;
    // Patch the copy inside the `ragen:plugin` section (the string may also sit in a data segment).
    let section = bytes
        .windows(12)
        .position(|w| w == b"ragen:plugin")
        .expect("manifest section in fixture");
    let at = section
        + bytes[section..]
            .windows(from.len())
            .position(|w| w == from)
            .expect("manifest in fixture");
    bytes[at..at + from.len()].copy_from_slice(to);
    match sandbox().load_bytes("hostile-v1.wasm", &bytes) {
        Err(e @ LoadError::IncompatibleInterface { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("9.0.0") && msg.contains("^0.1.0"), "{msg}");
        }
        other => panic!("expected IncompatibleInterface, got {:?}", other.err()),
    }
}

#[test]
fn missing_export_is_refused() {
    match sandbox().load_bytes("noexport.wasm", &fixture(env!("FIXTURE_NOEXPORT"))) {
        Err(e @ LoadError::MissingExport { .. }) => {
            assert!(e.to_string().contains("ragen:gym/environment"), "{e}")
        }
        other => panic!("expected MissingExport, got {:?}", other.err()),
    }
}

#[test]
fn malformed_and_truncated_files_are_refused() {
    assert!(matches!(
        sandbox().load_bytes("junk.wasm", b"MZ\x90\x00 this is not wasm"),
        Err(LoadError::Malformed { .. })
    ));
    let bytes = hostile_bytes();
    for cut in [9, 100, bytes.len() / 2, bytes.len() - 1] {
        match sandbox().load_bytes("truncated.wasm", &bytes[..cut]) {
            Err(LoadError::Malformed { .. }) => {}
            other => panic!("cut at {cut}: expected Malformed, got {:?}", other.err()),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.wasm");
    assert!(matches!(
        sandbox().load_file(&missing),
        Err(LoadError::File(ragen_gym_core::PluginFileError::Io { .. }))
    ));
}

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

#[test]
fn inspect_reads_the_manifest_without_running_and_hashes_the_file() {
    let bytes = hostile_bytes();
    let info = inspect_bytes("hostile.wasm", &bytes).unwrap();
    assert_eq!(info.manifest.id, "hostile/Hostile-v0");
    assert_eq!(
        info.manifest.interface_version,
        ragen_gym_core::INTERFACE_VERSION
    );
    assert_eq!(
        info.manifest.capabilities.http,
        vec!["127.0.0.1:9".to_string()]
    );
    assert_eq!(info.sha256, sha256_hex(&bytes));
    assert_eq!(info.sha256.len(), 64);
    assert!(
        info.imports
            .iter()
            .any(|i| i.starts_with("ragen:gym/http@")),
        "{:?}",
        info.imports
    );
    assert!(
        info.exports
            .iter()
            .any(|i| i.starts_with("ragen:gym/environment@")),
        "{:?}",
        info.exports
    );
}

#[test]
fn compiled_code_is_cached_on_disk_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SandboxConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        max_instances: 4,
        ..SandboxConfig::default()
    };
    let bytes = hostile_bytes();
    let sha = sha256_hex(&bytes);
    Sandbox::new(cfg.clone())
        .unwrap()
        .load_bytes("h", &bytes)
        .unwrap();
    let entries: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0].starts_with(&sha) && entries[0].ends_with(".cwasm"),
        "{entries:?}"
    );
    // A second sandbox loads from the cache and runs.
    let p = Sandbox::new(cfg).unwrap().load_bytes("h", &bytes).unwrap();
    assert_eq!(
        WasmEnv::new(&p, "", Grants::default())
            .unwrap()
            .reset(0)
            .unwrap()
            .observation,
        "ok"
    );
}

#[test]
fn reward_function_plugin_scores_under_limits() {
    let p = sandbox()
        .load_bytes("reward-len.wasm", &fixture(env!("FIXTURE_REWARD_LEN")))
        .unwrap();
    let mut rf = WasmRewardFunction::new(&p).unwrap();
    assert_eq!(rf.name(), "test/ResponseLength-v0");
    let turn = |resp: &str| Turn {
        observation: "o".into(),
        actions_left: 5,
        response: resp.into(),
        think: None,
        answer: Some("Up".into()),
        actions: vec!["Up".into()],
        env_reward: 0.0,
        action_is_valid: true,
        action_is_effective: true,
        format_penalty: false,
        info: vec![],
        steps: vec![],
        sampled: None,
    };
    let traj = Trajectory {
        env_id: "ragen/Sokoban-v0".into(),
        tag: "SimpleSokoban".into(),
        group: 0,
        seed: 3,
        turns: vec![turn("0123456789"), turn("abcde")],
        final_observation: "done".into(),
        num_actions: 2,
        terminated: true,
        truncated: false,
        success: true,
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    };
    let RewardBreakdown { total, components } = rf.score(&traj).unwrap();
    // -0.01 per response byte (15 bytes) + 1 for success.
    assert!((total - (1.0 - 0.15)).abs() < 1e-12, "{total}");
    assert_eq!(components.len(), 2);
    let empty = Trajectory {
        turns: vec![],
        ..traj.clone()
    };
    assert_eq!(
        rf.score(&empty).unwrap_err(),
        RewardError::Refused {
            message: "no turns to score".into()
        }
    );
    let nan = Trajectory {
        env_id: "nan/Nan-v0".into(),
        ..traj.clone()
    };
    match rf.score(&nan) {
        Err(RewardError::Plugin(f)) => assert_eq!(f.kind, PluginFailureKind::BadOutput, "{f}"),
        other => panic!("expected bad output, got {other:?}"),
    }
    // Recovers with a fresh instance.
    assert!(rf.score(&traj).is_ok());
    // An env plugin is not a reward function, and vice versa.
    assert!(WasmRewardFunction::new(&hostile()).is_err());
    assert!(WasmEnv::new(&p, "", Grants::default()).is_err());
}
