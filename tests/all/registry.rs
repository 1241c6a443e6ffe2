//! Plugins by reference against real servers on loopback (README, "Published plugins, pinned by
//! digest"): Debian's `docker-registry` (the CNCF distribution registry) and a local HTTP server.
//! Every failure is a typed [`RegistryError`] and leaves the cache without a file, temp files
//! included.

use crate::servers::{HttpServer, Registry, Reply};
use ragen_gym_cli::cmd::{eval, publish};
use ragen_gym_cli::error::exit_code_of;
use ragen_gym_cli::shared::sandbox::SandboxArgs;
use ragen_gym_cli::shared::source::SourceArgs;
use ragen_gym_net::NetError;
use ragen_gym_registry::{
    Digest, LockFile, Origin, PluginCache, PluginRef, PluginRole, RegistryError, ResolveOptions,
    Resolver, WasmComponentInfo,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

fn builtin(name: &str) -> Vec<u8> {
    ragen_gym_builtins::find(name).unwrap().wasm.to_vec()
}

/// Every file under `dir`, recursively (temp files included).
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

fn resolver(cache: &Path, insecure: &[String], allow_unpinned: bool) -> Resolver {
    Resolver::new(
        PluginCache::new(cache),
        ResolveOptions {
            allow_unpinned,
            insecure_hosts: insecure.to_vec(),
            ..ResolveOptions::default()
        },
    )
}

fn oci(host: &str, rest: &str) -> PluginRef {
    format!("oci://{host}/{rest}").parse().unwrap()
}

fn registry_error(e: &anyhow::Error) -> &RegistryError {
    e.chain()
        .find_map(|c| c.downcast_ref::<RegistryError>())
        .unwrap_or_else(|| panic!("no RegistryError in {e:#}"))
}

/// Push raw bytes as a one-layer artifact with the given media types, bypassing `publish`'s own
/// checks (a hostile or careless publisher).
fn push_raw(host: &str, repo_tag: &str, layer: &[u8], layer_media: &str, config_media: &str) {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let image: oci_client::Reference = format!("{host}/{repo_tag}").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(client.push(
        &image,
        &[ImageLayer::new(
            layer.to_vec(),
            layer_media.to_string(),
            None,
        )],
        Config::new(b"{}".to_vec(), config_media.to_string(), None),
        &oci_client::secrets::RegistryAuth::Anonymous,
        None,
    ))
    .unwrap();
}

#[test]
fn publish_then_run_by_tag_and_digest_and_the_lock_catches_a_moved_tag() {
    let reg = Registry::start();
    let source = SourceArgs {
        insecure_registry: vec![reg.host.clone()],
        ..SourceArgs::default()
    };
    let tag = format!("oci://{}/ragen/sokoban:0.1.0", reg.host);
    publish::run(publish::Args {
        plugin: "sokoban".into(),
        reference: tag.clone(),
        json: true,
        source: source.clone(),
    })
    .unwrap();

    // The registry holds the CNCF Wasm artifact: wasm config, one application/wasm layer.
    let cache = tempfile::tempdir().unwrap();
    let r = resolver(cache.path(), std::slice::from_ref(&reg.host), false);
    let got = r.resolve(&tag.parse().unwrap(), None).unwrap();
    assert_eq!(got.bytes, builtin("sokoban"));
    assert_eq!(got.digest, Digest::of(&builtin("sokoban")));
    assert_eq!(got.origin, Origin::Network);
    let manifest = got.oci_manifest.unwrap();
    let pinned = format!("oci://{}/ragen/sokoban@{manifest}", reg.host);
    // by manifest digest: the manifest and the layer are then both cached by digest
    let again = r.resolve(&pinned.parse().unwrap(), None).unwrap();
    assert_eq!((again.digest, again.origin), (got.digest, Origin::Cache));

    // eval by tag writes a lock with reference, digest, manifest, id, version, interface
    let run = tempfile::tempdir().unwrap();
    let eval_args = |env: &str, locked: Option<&Path>| eval::Args {
        env: env.into(),
        policy: eval::PolicyKind::Random,
        episodes: 3,
        seed: 0,
        config: String::new(),
        json: true,
        model: None,
        set: vec![],
        no_cpu_profile: false,
        device: Default::default(),
        base_url: None,
        api_key_env: "OPENAI_API_KEY".into(),
        continue_final_message: false,
        concurrency: 1,
        max_retries: 0,
        request_timeout: 10,
        max_response_bytes: 8 << 20,
        run_dir: Some(run.path().to_path_buf()),
        sandbox: SandboxArgs {
            source: SourceArgs {
                locked: locked.map(Path::to_path_buf),
                ..source.clone()
            },
            ..SandboxArgs::default()
        },
    };
    eval::run(eval_args(&tag, None)).unwrap();
    let lock_path = run.path().join("ragen-gym.lock");
    let lock = LockFile::read(&lock_path).unwrap();
    let e = &lock.plugins[0];
    assert_eq!(e.role, PluginRole::Env);
    assert_eq!(e.reference, tag);
    assert_eq!(e.digest, got.digest);
    assert_eq!(e.oci_manifest, Some(manifest));
    assert_eq!(
        (
            e.id.as_str(),
            e.version.as_str(),
            e.interface_version.as_str()
        ),
        (
            "ragen/Sokoban-v0",
            "0.1.0",
            ragen_gym_core::INTERFACE_VERSION
        )
    );
    let saved = tempfile::tempdir().unwrap();
    let locked = saved.path().join("ragen-gym.lock");
    std::fs::copy(&lock_path, &locked).unwrap();
    // same tag, same content: the locked run passes
    eval::run(eval_args(&tag, Some(&locked))).unwrap();

    // The tag moves to another plugin: the locked run refuses it, naming both digests.
    publish::run(publish::Args {
        plugin: "frozenlake".into(),
        reference: tag.clone(),
        json: true,
        source: source.clone(),
    })
    .unwrap();
    let err = eval::run(eval_args(&tag, Some(&locked))).unwrap_err();
    assert_eq!(exit_code_of(&err), ExitCode::from(11), "{err:#}");
    match registry_error(&err) {
        RegistryError::LockMismatch { locked, found, .. } => {
            assert_eq!(*locked, got.digest);
            assert_eq!(*found, Digest::of(&builtin("frozenlake")));
        }
        other => panic!("{other:?}"),
    }
    let msg = format!("{err:#}");
    assert!(
        msg.contains(&got.digest.to_string())
            && msg.contains(&Digest::of(&builtin("frozenlake")).to_string()),
        "{msg}"
    );
    // a plugin the lock does not list is refused too
    let err = eval::run(eval_args("bandit", Some(&locked))).unwrap_err();
    assert!(
        format!("{err:#}").contains("env plugin bandit is not in lock file"),
        "{err:#}"
    );
    // the old upload is still reachable by its manifest digest
    eval::run(eval_args(&pinned, None)).unwrap();
}

#[test]
fn a_registry_that_is_down_is_unreachable_but_pinned_plugins_run_from_the_cache() {
    let mut reg = Registry::start();
    let r0 = resolver(
        tempfile::tempdir().unwrap().path(),
        &[reg.host.clone()],
        false,
    );
    let published = r0
        .publish(
            &builtin("bandit"),
            &oci(&reg.host, "ragen/bandit:1"),
            WasmComponentInfo::default(),
            BTreeMap::new(),
        )
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let r = resolver(cache.path(), std::slice::from_ref(&reg.host), false);
    let pinned: PluginRef = published.pinned_reference().parse().unwrap();
    r.resolve(&pinned, None).unwrap();
    reg.stop();

    let fresh = tempfile::tempdir().unwrap();
    let err = resolver(fresh.path(), &[reg.host.clone()], false)
        .resolve(&oci(&reg.host, "ragen/bandit:1"), None)
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Net(NetError::Unreachable { url, .. }) if url.contains(&reg.host)),
        "{err:?}"
    );
    assert!(files(fresh.path()).is_empty(), "{:?}", files(fresh.path()));
    // a digest-pinned reference needs no registry once cached
    let again = r.resolve(&pinned, None).unwrap();
    assert_eq!(again.origin, Origin::Cache);
    assert_eq!(again.bytes, builtin("bandit"));
}

#[test]
fn non_component_layers_and_non_wasm_artifacts_are_refused() {
    let reg = Registry::start();
    // a core module (not a component) in an application/wasm layer with the wasm config
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    push_raw(
        &reg.host,
        "evil/core:1",
        &core_module,
        "application/wasm",
        "application/vnd.wasm.config.v0+json",
    );
    // a container image, not a Wasm artifact
    push_raw(
        &reg.host,
        "evil/image:1",
        &builtin("bandit"),
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.config.v1+json",
    );
    let cache = tempfile::tempdir().unwrap();
    let r = resolver(cache.path(), std::slice::from_ref(&reg.host), false);
    let err = r.resolve(&oci(&reg.host, "evil/core:1"), None).unwrap_err();
    assert!(
        matches!(&err, RegistryError::NotAComponent { reason, .. } if reason.contains("core wasm module")),
        "{err:?}"
    );
    let err = r
        .resolve(&oci(&reg.host, "evil/image:1"), None)
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::NotAWasmArtifact { reason, .. } if reason.contains("application/vnd.oci.image.config.v1+json")),
        "{err:?}"
    );
    // a manifest digest that is not in the registry
    let missing = format!("ragen/bandit@{}", Digest::of(b"nothing"));
    let err = r.resolve(&oci(&reg.host, &missing), None).unwrap_err();
    assert!(matches!(&err, RegistryError::NotFound { .. }), "{err:?}");
    // `publish` refuses a non-component before any request
    let err = r
        .publish(
            &core_module,
            &oci(&reg.host, "evil/core:2"),
            WasmComponentInfo::default(),
            BTreeMap::new(),
        )
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::NotAComponent { .. }),
        "{err:?}"
    );
    assert!(files(cache.path()).is_empty(), "{:?}", files(cache.path()));
}

#[test]
fn pinned_urls_are_verified_and_every_failure_leaves_the_cache_clean() {
    let server = HttpServer::start();
    let bandit = builtin("bandit");
    let good = Digest::of(&bandit);
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    server.route("/bandit.wasm", vec![Reply::ok(&bandit)]);
    server.route(
        "/truncated.wasm",
        vec![Reply {
            content_length: bandit.len(),
            ..Reply::ok(&bandit[..bandit.len() / 2])
        }],
    );
    server.route("/core.wasm", vec![Reply::ok(&core_module)]);
    server.route("/gone.wasm", vec![Reply::status(404, &[])]);
    let host = vec![server.host()];
    let url = |path: &str, d: &Digest| -> PluginRef {
        format!("{}#sha256={}", server.url(path), d.hex())
            .parse()
            .unwrap()
    };
    let cache = tempfile::tempdir().unwrap();
    let r = resolver(cache.path(), &host, false);

    // plain HTTP to a host that was not granted: refused before any request
    let err = resolver(cache.path(), &[], false)
        .resolve(&url("/bandit.wasm", &good), None)
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::InsecureHost { host, .. } if *host == server.host()),
        "{err:?}"
    );
    // no pin: refused before any request unless allowed
    let unpinned: PluginRef = server.url("/bandit.wasm").parse().unwrap();
    let err = r.resolve(&unpinned, None).unwrap_err();
    assert!(matches!(err, RegistryError::Unpinned { .. }), "{err:?}");
    assert_eq!(server.total(), 0);

    // wrong digest: typed, names both
    let wrong = Digest::of(b"something else");
    let err = r.resolve(&url("/bandit.wasm", &wrong), None).unwrap_err();
    match &err {
        RegistryError::DigestMismatch {
            expected, actual, ..
        } => assert_eq!((expected, actual), (&wrong.to_string(), &good.to_string())),
        other => panic!("{other:?}"),
    }
    // truncated download: the body stops at half of its Content-Length
    let err = r.resolve(&url("/truncated.wasm", &good), None).unwrap_err();
    match &err {
        RegistryError::Net(NetError::Truncated {
            expected, received, ..
        }) => {
            assert_eq!(*expected, Some(bandit.len() as u64));
            assert!(*received < bandit.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    // a core module with the right pin is still not a component
    let err = r
        .resolve(&url("/core.wasm", &Digest::of(&core_module)), None)
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::NotAComponent { .. }),
        "{err:?}"
    );
    let err = r.resolve(&url("/gone.wasm", &good), None).unwrap_err();
    assert!(
        matches!(err, RegistryError::Status { status: 404, .. }),
        "{err:?}"
    );
    // nothing was written by any failure
    assert!(files(cache.path()).is_empty(), "{:?}", files(cache.path()));

    // success: verified, cached by digest; the second resolve makes no request
    let ok = r.resolve(&url("/bandit.wasm", &good), None).unwrap();
    assert_eq!((ok.digest, ok.origin), (good, Origin::Network));
    let hits = server.hits("/bandit.wasm");
    let again = r.resolve(&url("/bandit.wasm", &good), None).unwrap();
    assert_eq!(again.origin, Origin::Cache);
    assert_eq!(server.hits("/bandit.wasm"), hits);
    let cached = files(cache.path());
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(cached[0].ends_with(&format!("sha256/{}.wasm", good.hex())));
    // a lock that records another digest refuses the pinned URL before downloading
    let lock = Path::new("run/ragen-gym.lock");
    let err = r
        .resolve(&url("/bandit.wasm", &good), Some((&wrong, lock)))
        .unwrap_err();
    assert!(matches!(err, RegistryError::LockMismatch { .. }), "{err:?}");
    // unpinned but allowed: downloaded and verified as a component
    let got = resolver(cache.path(), &host, true)
        .resolve(&unpinned, None)
        .unwrap();
    assert_eq!(got.digest, good);
}

#[test]
fn a_registry_that_asks_for_a_token_gets_one_and_the_token_goes_only_to_it() {
    let reg = HttpServer::start();
    let bandit = builtin("bandit");
    let layer = Digest::of(&bandit);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
            "digest": Digest::of(b"{}").to_string(), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer.to_string(),
            "size": bandit.len()}],
    }))
    .unwrap();
    let challenge = format!(
        "WWW-Authenticate: Bearer realm=\"{}\",service=\"test-registry\",scope=\"repository:acme/bandit:pull\"",
        reg.url("/token")
    );
    let manifest_path = "/v2/acme/bandit/manifests/1";
    reg.route(
        manifest_path,
        vec![Reply::status(401, &[&challenge]), Reply::ok(&manifest)],
    );
    reg.route("/token", vec![Reply::ok(br#"{"token":"t-123"}"#)]);
    reg.route(
        &format!("/v2/acme/bandit/blobs/{layer}"),
        vec![Reply::ok(&bandit)],
    );
    let cache = tempfile::tempdir().unwrap();
    let got = resolver(cache.path(), &[reg.host()], false)
        .resolve(&oci(&reg.host(), "acme/bandit:1"), None)
        .unwrap();
    assert_eq!(got.digest, layer);
    let seen = reg.authorizations();
    let paths: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            manifest_path,
            "/token?service=test-registry&scope=repository%3Aacme%2Fbandit%3Apull",
            manifest_path,
            &format!("/v2/acme/bandit/blobs/{layer}")[..],
        ]
    );
    // anonymous: nothing to the token service; the token to the registry after the challenge
    let auth: Vec<&str> = seen.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(auth, vec!["", "", "Bearer t-123", "Bearer t-123"]);
}
