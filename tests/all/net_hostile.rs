//! Hostile servers against every network read (`ragen_gym_net`): plugin URLs, OCI registries
//! and API models. The CLI runs as a child process under watch (`crate::child`): it is killed
//! past 512 MiB of resident memory or its time limit, and its peak RSS is checked, so each
//! hostile case bounds this machine too. Every server binds 127.0.0.1.

use crate::child::{Outcome, run_watched};
use crate::servers::{ChatServer, HttpServer, Reply};
use ragen_gym_cli::cmd::eval;
use ragen_gym_cli::cmd::eval::openai::{ChatClient, ChatError, RetryPolicy};
use ragen_gym_cli::shared::sandbox::SandboxArgs;
use ragen_gym_cli::shared::source::SourceArgs;
use ragen_gym_net::{Limits, NetError};
use ragen_gym_registry::{Digest, PluginCache, PluginRef, RegistryError, ResolveOptions, Resolver};
use std::path::Path;
use std::time::Duration;

/// The resident-memory bound of every hostile case, MiB.
const RSS_CAP_MIB: u64 = 512;

fn bandit() -> Vec<u8> {
    ragen_gym_builtins::find("bandit").unwrap().wasm.to_vec()
}

/// The run ended by itself, under the memory cap and in time, with exit code `code`, and its
/// stderr says `needle`.
fn assert_refused(what: &str, o: &Outcome, code: i32, needle: &str, within: Duration) {
    eprintln!(
        "{what}: exit {:?}, {:.1} s, peak RSS {:.0} MiB",
        o.code,
        o.elapsed.as_secs_f64(),
        o.peak_rss_mib
    );
    assert_eq!(o.killed, None, "{what}: killed by the watcher: {o:?}");
    assert!(o.peak_rss_mib < RSS_CAP_MIB as f64, "{what}: {o:?}");
    assert_eq!(o.code, Some(code), "{what}: {}", o.stderr);
    assert!(
        o.stderr.contains(needle),
        "{what}: {needle:?} not in {}",
        o.stderr
    );
    assert!(o.elapsed < within, "{what}: took {:?}", o.elapsed);
    assert!(o.stdout.is_empty(), "{what}: printed {}", o.stdout);
}

/// An OCI image manifest of a Wasm artifact whose one layer is `layer` (`size` bytes, foreign
/// `urls`).
fn wasm_manifest(layer: &Digest, size: usize, urls: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
            "digest": Digest::of(b"{}").to_string(), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer.to_string(),
            "size": size, "urls": urls}],
    }))
    .unwrap()
}

fn resolver(cache: &Path, insecure: &[String]) -> Resolver {
    Resolver::new(
        PluginCache::new(cache),
        ResolveOptions {
            allow_unpinned: true,
            insecure_hosts: insecure.to_vec(),
            ..ResolveOptions::default()
        },
    )
}

#[test]
fn endless_bodies_stop_at_their_caps() {
    let s = HttpServer::start();
    let h = s.host();
    s.route("/endless.wasm", vec![Reply::endless()]);
    // a registry whose manifest never ends, and one whose layer never ends
    s.route("/v2/evil/manifest/manifests/1", vec![Reply::endless()]);
    let layer = Digest::of(b"a layer of one MiB that never comes");
    s.route(
        "/v2/evil/layer/manifests/1",
        vec![Reply::ok(&wasm_manifest(&layer, 1 << 20, &[]))],
    );
    s.route(
        &format!("/v2/evil/layer/blobs/{layer}"),
        vec![Reply::endless()],
    );
    s.route("/v1/chat/completions", vec![Reply::endless()]);
    let limit = Duration::from_secs(60);
    let inspect = |r: &str| {
        run_watched(
            &["inspect", r, "--allow-unpinned", "--insecure-registry", &h],
            &[],
            limit,
            RSS_CAP_MIB,
        )
    };
    let url = s.url("/endless.wasm");
    let o = inspect(&url);
    assert_refused(
        "endless plugin URL",
        &o,
        11,
        "more than the cap of 268435456 bytes",
        limit,
    );
    assert!(o.stderr.contains(&url), "{}", o.stderr);
    let o = inspect(&format!("oci://{h}/evil/manifest:1"));
    assert_refused(
        "endless OCI manifest",
        &o,
        11,
        "more than the cap of 4194304 bytes",
        limit,
    );
    let o = inspect(&format!("oci://{h}/evil/layer:1"));
    assert_refused(
        "endless OCI layer",
        &o,
        11,
        "more than the cap of 1048576 bytes",
        limit,
    );
    let base = s.url("/v1");
    let o = run_watched(
        &[
            "eval",
            "--env",
            "bandit",
            "--model",
            "openai:mock",
            "--base-url",
            &base,
            "--max-retries",
            "0",
            "--set",
            "es_manager.val.env_groups=2",
        ],
        &[],
        limit,
        RSS_CAP_MIB,
    );
    assert_refused(
        "endless API response",
        &o,
        13,
        "more than the cap of 8388608 bytes",
        limit,
    );
}

#[test]
fn trickling_and_silent_servers_end_at_the_rate_floor_or_the_deadline() {
    let s = HttpServer::start();
    let h = s.host();
    // one byte a second: under the default floor of 1024 bytes/s over 30 s
    s.route(
        "/slow.wasm",
        vec![Reply::trickle(&[0u8; 200], Duration::from_secs(1))],
    );
    s.route("/v1/chat/completions", vec![Reply::silent()]);
    let limit = Duration::from_secs(90);
    let o = run_watched(
        &[
            "inspect",
            &s.url("/slow.wasm"),
            "--allow-unpinned",
            "--insecure-registry",
            &h,
        ],
        &[],
        limit,
        RSS_CAP_MIB,
    );
    assert_refused(
        "trickling plugin URL",
        &o,
        11,
        "slower than the minimum rate of 1024 bytes/s over 30 s",
        Duration::from_secs(45),
    );
    assert!(o.elapsed >= Duration::from_secs(29), "{o:?}");
    // An API server that accepts and never answers: the request's deadline ends it.
    let base = s.url("/v1");
    let o = run_watched(
        &[
            "eval",
            "--env",
            "bandit",
            "--model",
            "openai:mock",
            "--base-url",
            &base,
            "--max-time",
            "3",
            "--set",
            "es_manager.val.env_groups=2",
        ],
        &[],
        limit,
        RSS_CAP_MIB,
    );
    assert_refused(
        "silent API server",
        &o,
        13,
        "not complete within the deadline of 3 s",
        Duration::from_secs(20),
    );
}

#[test]
fn redirects_to_ungranted_ports_are_not_followed() {
    let granted = HttpServer::start();
    let other = HttpServer::start();
    let good = Digest::of(&bandit());
    other.route("/bandit.wasm", vec![Reply::ok(&bandit())]);
    granted.route(
        "/moved.wasm",
        vec![Reply::redirect(&other.url("/bandit.wasm"))],
    );
    granted.route("/here.wasm", vec![Reply::redirect("/bandit.wasm")]);
    granted.route("/bandit.wasm", vec![Reply::ok(&bandit())]);
    let cache = tempfile::tempdir().unwrap();
    let r = resolver(cache.path(), &[granted.host()]);
    let pinned =
        |url: String| -> PluginRef { format!("{url}#sha256={}", good.hex()).parse().unwrap() };
    let err = r
        .resolve(&pinned(granted.url("/moved.wasm")), None)
        .unwrap_err();
    match &err {
        RegistryError::Net(NetError::RedirectRefused { url, hop }) => {
            assert_eq!(*url, granted.url("/moved.wasm"));
            assert_eq!(hop.host, other.host());
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains(&format!("--insecure-registry {}", other.host())),
        "{err}"
    );
    assert_eq!(other.total(), 0, "the ungranted host was contacted");
    // a redirect within the granted host is followed
    let ok = r.resolve(&pinned(granted.url("/here.wasm")), None).unwrap();
    assert_eq!(ok.digest, good);

    // An OCI registry that redirects its blob to an ungranted port.
    let reg = HttpServer::start();
    reg.route(
        "/v2/evil/app/manifests/1",
        vec![Reply::ok(&wasm_manifest(&good, bandit().len(), &[]))],
    );
    reg.route(
        &format!("/v2/evil/app/blobs/{good}"),
        vec![Reply::redirect(&other.url("/bandit.wasm"))],
    );
    let fresh = tempfile::tempdir().unwrap();
    let image: PluginRef = format!("oci://{}/evil/app:1", reg.host()).parse().unwrap();
    let err = resolver(fresh.path(), &[reg.host()])
        .resolve(&image, None)
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Net(NetError::RedirectRefused { hop, .. }) if hop.host == other.host()),
        "{err:?}"
    );
    assert_eq!(other.total(), 0, "the ungranted host was contacted");
}

#[test]
fn foreign_layer_urls_are_refused_unless_their_host_is_granted() {
    let foreign = HttpServer::start();
    foreign.route("/bandit.wasm", vec![Reply::ok(&bandit())]);
    let reg = HttpServer::start();
    let good = Digest::of(&bandit());
    let urls = [foreign.url("/bandit.wasm")];
    reg.route(
        "/v2/evil/app/manifests/1",
        vec![Reply::ok(&wasm_manifest(&good, bandit().len(), &urls))],
    );
    // the registry does not serve the blob: a client that honours `urls` goes to them
    reg.route(
        &format!("/v2/evil/app/blobs/{good}"),
        vec![Reply::status(404, &[])],
    );
    let image: PluginRef = format!("oci://{}/evil/app:1", reg.host()).parse().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let err = resolver(cache.path(), &[reg.host()])
        .resolve(&image, None)
        .unwrap_err();
    match &err {
        RegistryError::ForeignLayerRefused { url, host, .. } => {
            assert_eq!(*url, foreign.url("/bandit.wasm"));
            assert_eq!(*host, foreign.host());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        foreign.total(),
        0,
        "an ungranted foreign host was contacted"
    );
    assert_eq!(reg.hits(&format!("/v2/evil/app/blobs/{good}")), 0);
    // granted, the foreign URL serves the layer the registry lacks
    let got = resolver(cache.path(), &[reg.host(), foreign.host()])
        .resolve(&image, None)
        .unwrap();
    assert_eq!(got.digest, good);
    assert_eq!(foreign.hits("/bandit.wasm"), 1);
}

#[test]
fn credentials_in_a_plugin_url_are_used_but_never_stored() {
    let files = HttpServer::start();
    files.route("/bandit.wasm?token=t0ken-9&v=1", vec![Reply::ok(&bandit())]);
    let chat = ChatServer::start(
        Duration::ZERO,
        Box::new(|_, _| (200, "</think><answer>Left</answer>".into())),
    );
    // unpinned, so it is downloaded (not taken from the cache) and the server sees the request
    let secret_url = format!(
        "http://alice:pa55word@{}/bandit.wasm?token=t0ken-9&v=1",
        files.host()
    );
    let run = tempfile::tempdir().unwrap();
    let args = |env: String| eval::Args {
        env,
        policy: eval::PolicyKind::Random,
        episodes: 1,
        seed: 0,
        config: String::new(),
        json: true,
        model: Some("openai:mock".into()),
        set: vec!["es_manager.val.env_groups=2".into()],
        no_cpu_profile: false,
        device: Default::default(),
        base_url: Some(chat.base_url.clone()),
        api_key_env: "RAGEN_GYM_TEST_UNSET_KEY".into(),
        continue_final_message: false,
        concurrency: 2,
        max_retries: 0,
        request_timeout: 10,
        max_response_bytes: 8 << 20,
        run_dir: Some(run.path().to_path_buf()),
        sandbox: SandboxArgs {
            source: SourceArgs {
                insecure_registry: vec![files.host()],
                allow_unpinned: true,
                ..SourceArgs::default()
            },
            ..SandboxArgs::default()
        },
    };
    // a failure names the plugin without its credentials
    let gone = format!(
        "http://alice:pa55word@{}/gone.wasm?token=t0ken-9",
        files.host()
    );
    let err = format!("{:#}", eval::run(args(gone)).unwrap_err());
    assert!(err.contains("answered HTTP 404"), "{err}");
    for secret in ["alice", "pa55word", "t0ken-9"] {
        assert!(!err.contains(secret), "{err}");
    }
    eval::run(args(secret_url)).unwrap();
    assert_eq!(files.hits("/bandit.wasm?token=t0ken-9&v=1"), 1);
    let stored = format!("http://{}/bandit.wasm?token=***&v=1", files.host());
    for name in ["ragen-gym.lock", "trajectories.jsonl", "metrics.jsonl"] {
        let text = std::fs::read_to_string(run.path().join(name)).unwrap();
        for secret in ["alice", "pa55word", "t0ken-9"] {
            assert!(!text.contains(secret), "{name} stores {secret:?}: {text}");
        }
        if name != "metrics.jsonl" {
            assert!(text.contains(&stored), "{name}: {text}");
        }
    }
}

#[test]
fn an_api_error_that_echoes_the_key_does_not_print_it() {
    let s = HttpServer::start();
    s.route(
        "/v1/chat/completions",
        vec![Reply {
            status: 401,
            ..Reply::ok(br#"{"error":{"message":"bad key in header: {authorization}"}}"#)
        }],
    );
    let key = "sk-live-0123456789abcdef";
    let client = ChatClient::new(
        &s.url("/v1"),
        Some(key.into()),
        1,
        Duration::from_secs(10),
        RetryPolicy::default(),
        Limits::API,
    )
    .unwrap();
    let err = client
        .complete_all(vec![crate::api_model::request()])
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ChatError::Status { status: 401, .. }),
        "{err:?}"
    );
    assert!(!msg.contains("0123456789abcdef"), "{msg}");
    assert!(msg.contains("bad key in header: Bearer ***"), "{msg}");
}

#[test]
fn a_device_as_a_plugin_file_is_refused_at_once() {
    let o = run_watched(
        &["inspect", "/dev/zero"],
        &[],
        Duration::from_secs(30),
        RSS_CAP_MIB,
    );
    assert_refused(
        "/dev/zero as a plugin",
        &o,
        11,
        "plugin file /dev/zero is a character device, not a regular file",
        Duration::from_secs(10),
    );
}
