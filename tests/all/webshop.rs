//! The WebShop bridge end to end: the `webshop-bridge` built-in running in the sandbox, reaching
//! a `ragen-gym-webshop` server on a loopback port through the gated `ragen:gym/http` import and
//! the reqwest transport.
//!
//! The shipped manifest declares the conventional ports (3000, 36001); the tests serve on
//! ephemeral ports, so they load a copy of the component whose manifest section declares those
//! ports instead (same length, padded with JSON whitespace; nothing else changes).

use std::sync::Arc;
use std::time::Duration;

use ragen_gym_core::{Env, EnvCallError, EnvError};
use ragen_gym_sandbox::{
    Grants, HostPort, Plugin, ReqwestTransport, Sandbox, SandboxConfig, WasmEnv,
};
use ragen_gym_webshop::{Catalog, WebShopServer};

/// The built-in bridge with its manifest's `capabilities.http` replaced by `targets`.
pub(crate) fn bridge_declaring(targets: &[String]) -> Vec<u8> {
    let mut bytes = ragen_gym_builtins::find("webshop-bridge")
        .expect("webshop-bridge built in")
        .wasm
        .to_vec();
    // The section's name is followed directly by its payload; the manifest JSON may also sit in
    // the data segment, which must stay untouched.
    let prefix = br#"ragen:plugin{"id":"ragen/WebShop-v0""#;
    let start = bytes
        .windows(prefix.len())
        .position(|w| w == prefix)
        .expect("manifest section in the component")
        + "ragen:plugin".len();
    let mut stream =
        serde_json::Deserializer::from_slice(&bytes[start..]).into_iter::<serde_json::Value>();
    let mut manifest = stream
        .next()
        .expect("a JSON manifest")
        .expect("valid manifest JSON");
    let len = stream.byte_offset();
    manifest["capabilities"]["http"] = serde_json::json!(targets);
    let mut patched = manifest.to_string().into_bytes();
    assert!(
        patched.len() <= len,
        "patched manifest must fit in the original section"
    );
    patched.resize(len, b' ');
    bytes[start..start + len].copy_from_slice(&patched);
    bytes
}

fn sandbox() -> Sandbox {
    let transport = ReqwestTransport::new(Duration::from_secs(5), 1 << 20).expect("http client");
    Sandbox::builder()
        .config(SandboxConfig::default())
        .http_transport(Arc::new(transport))
        .build()
        .expect("sandbox")
}

fn load(sandbox: &Sandbox, servers: &[&WebShopServer]) -> Plugin {
    let targets: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    sandbox
        .load_bytes("webshop-bridge (test ports)", &bridge_declaring(&targets))
        .expect("load bridge")
}

fn env(plugin: &Plugin, server: &WebShopServer, granted: bool) -> WasmEnv {
    let config = format!(r#"{{"server":"{}","split":"test"}}"#, server.addr());
    let http = if granted {
        vec![HostPort::parse(&server.addr().to_string()).unwrap()]
    } else {
        vec![]
    };
    WasmEnv::new(
        plugin,
        &config,
        Grants {
            http,
            ..Grants::default()
        },
    )
    .expect("new env")
}

fn goal_seed(asin: &str, first_option: &str) -> u64 {
    Catalog::embedded().goal_index(asin, first_option).unwrap()
}

#[test]
fn bridge_plays_the_worked_example_through_the_sandbox() {
    let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let sandbox = sandbox();
    let plugin = load(&sandbox, &[&server]);
    let mut env = env(&plugin, &server, true);
    assert_eq!(env.spec().max_episode_steps, 9);
    let first = env.reset(goal_seed("B0WS000001", "black")).unwrap();
    assert!(
        first
            .observation
            .starts_with("WebShop [SEP] Instruction: [SEP] "),
        "{}",
        first.observation
    );
    assert!(
        first
            .observation
            .ends_with("\nAvailable actions: search[<content>]")
    );
    for action in [
        "search[cotton spandex]",
        "click[b0ws000001]",
        "click[black]",
        "click[large]",
    ] {
        let s = env.step(action).unwrap();
        assert!(s.action_is_valid && !s.terminated, "{action}");
    }
    let buy = env.step("click[buy now]").unwrap();
    assert_eq!((buy.reward, buy.terminated, buy.success), (1.0, true, true));
    assert_eq!(env.stats().http_denied, 0);
}

#[test]
fn a_host_not_granted_gives_a_clear_error_and_the_run_continues() {
    let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let sandbox = sandbox();
    let plugin = load(&sandbox, &[&server]);
    let mut denied = env(&plugin, &server, false);
    let err = denied.reset(0).unwrap_err();
    let EnvCallError::Env {
        error: EnvError::Other(message),
        ..
    } = &err
    else {
        panic!("expected the env's own error, got {err:?}");
    };
    let target = server.addr().to_string();
    assert!(
        message.contains("denied") && message.contains(&format!("--allow-host {target}")),
        "{message}"
    );
    assert_eq!(denied.stats().http_denied, 1);
    assert_eq!(denied.stats().plugin_errors, 0, "a denial is not a trap");
    // The same instance keeps working (and keeps being refused); a granted env is unaffected.
    assert!(denied.reset(1).is_err());
    assert_eq!(denied.stats().http_denied, 2);
    let mut granted = env(&plugin, &server, true);
    assert!(
        granted
            .reset(0)
            .unwrap()
            .observation
            .starts_with("WebShop [SEP] ")
    );
    assert!(granted.step("search[tea]").unwrap().action_is_valid);
}

#[test]
fn server_going_down_ends_that_trajectory_while_others_continue() {
    let doomed = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let healthy = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let sandbox = sandbox();
    let plugin = load(&sandbox, &[&doomed, &healthy]);
    let mut a = env(&plugin, &doomed, true);
    let mut b = env(&plugin, &healthy, true);
    let seed = goal_seed("B0WS000019", "black");
    a.reset(seed).unwrap();
    b.reset(seed).unwrap();
    a.step("search[insulated water bottle]").unwrap();
    b.step("search[insulated water bottle]").unwrap();
    let doomed_addr = doomed.addr().to_string();
    doomed.stop();
    let err = a.step("click[b0ws000019]").unwrap_err();
    let EnvCallError::Env {
        error: EnvError::Other(reason),
        ..
    } = &err
    else {
        panic!("expected the env's own error, got {err:?}");
    };
    assert!(
        reason.contains(&doomed_addr) && reason.contains("/step"),
        "{reason}"
    );
    // The other env finishes its episode.
    b.step("click[b0ws000019]").unwrap();
    b.step("click[black]").unwrap();
    b.step("click[32 oz]").unwrap();
    let buy = b.step("click[buy now]").unwrap();
    assert!(buy.terminated && buy.success, "{buy:?}");
}

/// A random policy for the bridge: each turn it picks uniformly (splitmix64 seeded by the
/// episode seed) among the actions listed on the observation's last line, searching with the
/// instruction text when it picks `search[<content>]`. Returns (successes, sum of rewards,
/// purchases).
fn random_policy_eval(env: &mut dyn Env, seeds: std::ops::Range<u64>) -> (u32, f64, u32) {
    let (mut successes, mut total, mut purchases) = (0u32, 0.0f64, 0u32);
    for seed in seeds {
        let mut rng = seed;
        let first = env.reset(seed).expect("reset");
        let instruction = first
            .observation
            .split(" [SEP] ")
            .nth(2)
            .expect("home page carries the instruction")
            .to_string();
        let mut observation = first.observation;
        for _ in 0..env.spec().max_episode_steps {
            let listed = observation
                .rsplit_once("\nAvailable actions: ")
                .map(|(_, a)| a)
                .unwrap_or("");
            let actions: Vec<&str> = listed.split(", ").filter(|a| !a.is_empty()).collect();
            assert!(
                !actions.is_empty(),
                "every page but the last lists actions: {observation}"
            );
            let pick =
                actions[(ragen_gym_core::splitmix64(&mut rng) % actions.len() as u64) as usize];
            let action = pick.replace("<content>", &instruction);
            let step = env.step(&action).expect("step");
            assert!(step.action_is_valid, "listed actions are valid: {action}");
            assert!((0.0..=1.0).contains(&step.reward));
            total += step.reward;
            observation = step.observation;
            if step.terminated {
                purchases += 1;
                successes += u32::from(step.success);
                assert_eq!(step.success, step.reward >= 1.0);
            }
            if step.terminated || step.truncated {
                break;
            }
        }
    }
    (successes, total, purchases)
}

/// The random-policy baseline over the 100 first test-split goals: every listed action is
/// valid, rewards stay in [0, 1], success means reward 1, and the numbers are reproducible.
/// Run with `--nocapture` to see them.
#[test]
fn random_policy_over_100_test_goals() {
    let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let sandbox = sandbox();
    let plugin = load(&sandbox, &[&server]);
    let mut env = env(&plugin, &server, true);
    let first = random_policy_eval(&mut env, 0..100);
    let (successes, total, purchases) = first;
    eprintln!(
        "webshop random policy, 100 test goals: success rate {:.2}, mean reward {:.4}, purchases {purchases}",
        f64::from(successes) / 100.0,
        total / 100.0
    );
    assert!(successes <= purchases);
    assert_eq!(
        random_policy_eval(&mut env, 0..100),
        first,
        "same seeds, same episodes"
    );
}
