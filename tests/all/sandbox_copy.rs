//! What a plugin may hand the host, and how a refusal names it (`docs/architecture.md` §5,
//! "Sandbox rules"): results and import arguments are checked field by field before they are
//! copied out of the guest (`host/sandbox/src/lift.rs`), so an oversized field is refused by its
//! name and cap, a huge log line is clipped and the call goes on, and an HTTP request with
//! thousands of headers meets the capability gate before its headers are read. Each case is
//! sized past the per-call copy budget (8 MiB + 64 KiB in this suite's sandbox), which before
//! the field checks was the only thing to stop it and named no field ("reset copied more than
//! the budget of 8454144 bytes").

use crate::sandbox_hostile::{env, hostile, reset_kind, sandbox};
use ragen_gym_core::{Env, EnvCallError, PluginFailureKind};
use ragen_gym_sandbox::{Grants, HostPort, WasmEnv};

/// This suite's copy budget: 8 MiB of HTTP body (8 x the 1 MiB output cap) + 64 KiB of head.
const BUDGET: usize = (8 << 20) + (64 << 10);

#[test]
fn the_budget_these_cases_exceed() {
    assert_eq!(sandbox().config().copy_budget_bytes(), BUDGET);
}

#[test]
fn an_oversized_result_is_refused_by_its_field_and_cap() {
    // 100,000,000 bytes of observation: refused on its length alone.
    let (kind, msg) = reset_kind("big-obs");
    assert_eq!(kind, PluginFailureKind::BadOutput);
    assert!(
        msg.ends_with("reset: observation is 100000000 bytes, over the cap of 1048576"),
        "{msg}"
    );
    // 4,000 metrics with names of 4,096 bytes: 16,384,000 bytes of names, twice the budget.
    let (kind, msg) = reset_kind("info:4000:4096");
    assert_eq!(kind, PluginFailureKind::BadOutput);
    assert!(
        msg.ends_with("reset: reset info has 4000 metrics, over the cap of 64"),
        "{msg}"
    );
    // Within the count, one name over its cap of 64 bytes.
    let (kind, msg) = reset_kind("info:3:65");
    assert_eq!(kind, PluginFailureKind::BadOutput);
    assert!(
        msg.ends_with("reset: metric name is 65 bytes, over the cap of 64"),
        "{msg}"
    );
    // At the caps: 64 metrics with names of 64 bytes pass.
    assert_eq!(env("info:64:64").reset(0).unwrap().info.len(), 64);
}

#[test]
fn an_oversized_spec_is_refused_by_its_field_and_cap() {
    // 2,000 action names of 8,192 bytes: 16,384,000 bytes, twice the budget.
    let err = match WasmEnv::new(&hostile(), "spec-actions:2000:8192", Grants::default()) {
        Err(EnvCallError::Plugin(p)) => p,
        other => panic!("expected a plugin failure, got ok={}", other.is_ok()),
    };
    assert_eq!(err.kind, PluginFailureKind::BadOutput);
    assert!(
        err.message
            .ends_with("spec: spec has 2000 action names, over the cap of 1024"),
        "{err}"
    );
    let err = match WasmEnv::new(&hostile(), "spec-actions:2:257", Grants::default()) {
        Err(EnvCallError::Plugin(p)) => p,
        other => panic!("expected a plugin failure, got ok={}", other.is_ok()),
    };
    assert!(
        err.message
            .ends_with("spec: action name is 257 bytes, over the cap of 256"),
        "{err}"
    );
    let spec = WasmEnv::new(&hostile(), "spec-actions:1024:256", Grants::default())
        .unwrap()
        .spec()
        .clone();
    assert_eq!(spec.action_names.map(|a| a.len()), Some(1024));
}

#[test]
fn a_log_line_larger_than_the_budget_is_clipped_and_the_call_succeeds() {
    // 20,000,000 bytes in one line: the first 1,024 are copied, the line is counted as clipped.
    let mut e = env("big-log:20000000");
    assert_eq!(e.reset(0).unwrap().observation, "logged");
    let stats = e.stats();
    assert_eq!((stats.log_clipped, stats.log_dropped), (1, 0));
    // A line at the cap is not clipped.
    let mut e = env("big-log:1024");
    e.reset(0).unwrap();
    assert_eq!(e.stats().log_clipped, 0);
    let mut e = env("big-log:1025");
    e.reset(0).unwrap();
    assert_eq!(e.stats().log_clipped, 1);
}

fn granted() -> Grants {
    Grants {
        http: vec![HostPort::parse("127.0.0.1:9").unwrap()],
        ..Grants::default()
    }
}

#[test]
fn a_request_with_thousands_of_headers_meets_the_gate_before_its_headers_are_read() {
    // 20,000 headers with 1 KiB values (20 MB, over twice the budget) to an undeclared host:
    // "not declared", and counted as a denial.
    let mut e = WasmEnv::new(&hostile(), "http-headers-undeclared:20000:1024", granted()).unwrap();
    let obs = e.reset(0).unwrap().observation;
    assert!(
        obs.starts_with("denied: example.com:80 is not declared"),
        "{obs}"
    );
    assert_eq!(e.stats().http_denied, 1);
    // Declared but not granted: "not granted".
    let mut e = env("http-headers:20000:1024");
    let obs = e.reset(0).unwrap().observation;
    assert!(
        obs.starts_with("denied: 127.0.0.1:9 is not granted"),
        "{obs}"
    );
    // Granted: the header count's cap, then the header bytes' cap (64 x (5 + 1,100) bytes).
    let observe = |mode: &str| {
        WasmEnv::new(&hostile(), mode, granted())
            .unwrap()
            .reset(0)
            .unwrap()
            .observation
    };
    assert_eq!(
        observe("http-headers:20000:1024"),
        "invalid: request has 20000 headers, over the cap of 64"
    );
    assert_eq!(
        observe("http-headers:65:1"),
        "invalid: request has 65 headers, over the cap of 64"
    );
    assert_eq!(
        observe("http-headers:64:1100"),
        "invalid: request headers are over the cap of 65536 bytes"
    );
    // Within both caps the request reaches the transport (none in this sandbox).
    let obs = observe("http-headers:64:900");
    assert!(obs.starts_with("transport:"), "{obs}");
}

#[test]
fn a_budget_overrun_in_an_import_names_the_import_not_the_result() {
    // 200,000 one-byte headers: the lazily lifted list alone is charged 200,000 host entries
    // (a pair of `WasmStr`s, about 80 bytes), past the budget, while the guest is inside `reset`.
    let (kind, msg) = reset_kind("http-headers-undeclared:200000:1");
    assert_eq!(kind, PluginFailureKind::BadOutput);
    assert!(
        msg.contains(&format!(
            "the arguments of a host import called during reset came to more than the budget \
             of {BUDGET} bytes"
        )),
        "{msg}"
    );
}
