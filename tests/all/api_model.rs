//! API models as policies (#14): `eval --model openai:NAME --base-url URL` against a real
//! OpenAI-compatible server on loopback, llama-cpp-python's `python -m llama_cpp.server`
//! serving the default model's GGUF; and the client's retries and errors against a scripted
//! HTTP server.

use crate::servers::{HttpServer, LlamaServer, Reply, free_port};
use ragen_gym_cli::cmd::eval::openai::{ChatClient, ChatError, ChatRequest, RetryPolicy, WireMessage};
use ragen_gym_cli::cmd::plugin_args::SandboxArgs;
use ragen_gym_cli::cmd::{eval, replay};
use std::time::Duration;

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![WireMessage {
            role: "user",
            content: "hi".into(),
        }],
        temperature: 0.0,
        top_p: 1.0,
        max_tokens: 8,
        seed: 1,
        stop: vec![],
    }
}

fn client(base: &str, retries: u32) -> ChatClient {
    ChatClient::new(
        base,
        Some("sk-test".into()),
        4,
        Duration::from_secs(10),
        RetryPolicy {
            max_retries: retries,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
        },
    )
    .unwrap()
}

#[test]
fn retries_429_and_5xx_with_backoff_and_names_the_url_when_it_gives_up() {
    let server = HttpServer::start();
    let ok = br#"{"choices":[{"message":{"role":"assistant","content":"<answer>Up"},"finish_reason":"stop"}]}"#;
    server.route(
        "/a/v1/chat/completions",
        vec![
            Reply::status(503, &[]),
            Reply::status(429, &["Retry-After: 0"]),
            Reply::ok(ok),
        ],
    );
    server.route("/b/v1/chat/completions", vec![Reply::status(500, &[])]);
    server.route("/c/v1/chat/completions", vec![Reply::status(400, &[])]);
    let out = client(&server.url("/a/v1"), 3)
        .complete_all(vec![request()])
        .unwrap();
    assert_eq!(out[0].text, "<answer>Up");
    assert_eq!(server.hits("/a/v1/chat/completions"), 3);
    // a server that keeps failing: 1 + 3 retries, then an error naming the URL and status
    let err = client(&server.url("/b/v1"), 3)
        .complete_all(vec![request()])
        .unwrap_err();
    assert!(matches!(err, ChatError::Status { status: 500, attempts: 4, .. }), "{err:?}");
    assert!(err.to_string().contains(&server.url("/b/v1/chat/completions")), "{err}");
    assert_eq!(server.hits("/b/v1/chat/completions"), 4);
    // a client error is not retried
    let err = client(&server.url("/c/v1"), 3)
        .complete_all(vec![request()])
        .unwrap_err();
    assert!(matches!(err, ChatError::Status { status: 400, attempts: 1, .. }), "{err:?}");
    // nothing listening: the error names the URL
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    let err = client(&dead, 1).complete_all(vec![request()]).unwrap_err();
    assert!(matches!(err, ChatError::Unreachable { attempts: 2, .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("{dead}/chat/completions")), "{err}");
}

#[test]
fn eval_with_an_api_model_runs_the_validation_protocol_against_llama_cpp_server() {
    let gguf = ragen_gym_core::cache_root()
        .unwrap()
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.is_file(), "{} is missing; run scripts/setup.sh", gguf.display());
    let server = LlamaServer::start(&gguf);
    let run = tempfile::tempdir().unwrap();
    eval::run(eval::Args {
        env: "sokoban".into(),
        policy: eval::PolicyKind::Random,
        episodes: 0,
        seed: 0,
        config: String::new(),
        json: true,
        model: Some("openai:smollm2".into()),
        set: vec!["es_manager.val.env_groups=4".into()],
        no_cpu_profile: false,
        device: Default::default(),
        base_url: Some(server.base_url.clone()),
        api_key_env: "RAGEN_GYM_TEST_NO_KEY".into(),
        concurrency: 4,
        max_retries: 2,
        request_timeout: 300,
        run_dir: Some(run.path().to_path_buf()),
        sandbox: SandboxArgs::default(),
    })
    .unwrap();
    // the validation metrics and the four trajectories were recorded
    let metrics = std::fs::read_to_string(run.path().join("metrics.jsonl")).unwrap();
    let m: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    let success = m["val-env/success_rate"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&success), "{m}");
    assert!(m["val-env/SimpleSokoban/success"].is_number(), "{m}");
    let trajs = std::fs::read_to_string(run.path().join("trajectories.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = trajs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    for l in &lines {
        let first = &l["turns"][0];
        // the model answered (RAGEN prepends the forced `<think>` to API text)
        assert!(first["response"].as_str().unwrap().len() > "<think>".len(), "{l}");
        assert_eq!(l["plugin"], "sokoban");
    }
    // and the API-driven episodes replay identically on the env
    replay::run(replay::Args {
        run_dir: run.path().to_path_buf(),
        trajectory: None,
        env: None,
        sandbox: SandboxArgs::default(),
    })
    .unwrap();
}
