//! API models as policies (README, "API models"): `eval --model openai:NAME --base-url URL` against
//! an OpenAI-compatible chat server on loopback ([`ChatServer`]: tiny_http, a scripted model), and
//! the client's retries and errors against a scripted HTTP server.

use crate::servers::{ChatServer, HttpServer, Reply, free_port};
use ragen_gym_cli::cmd::eval::openai::{
    ChatClient, ChatError, ChatRequest, RetryPolicy, WireMessage,
};
use ragen_gym_cli::cmd::{eval, replay};
use ragen_gym_cli::shared::sandbox::SandboxArgs;
use ragen_gym_registry::LockFile;
use std::time::Duration;

/// A one-message chat request (shared with `net_hostile`).
pub(crate) fn request() -> ChatRequest {
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
        continue_final_message: false,
        add_generation_prompt: None,
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
        ragen_gym_net::Limits::API,
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
    assert!(
        matches!(
            err,
            ChatError::Status {
                status: 500,
                attempts: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&server.url("/b/v1/chat/completions")),
        "{err}"
    );
    assert_eq!(server.hits("/b/v1/chat/completions"), 4);
    // a client error is not retried
    let err = client(&server.url("/c/v1"), 3)
        .complete_all(vec![request()])
        .unwrap_err();
    assert!(
        matches!(
            err,
            ChatError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // nothing listening: the error names the URL
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    let err = client(&dead, 1).complete_all(vec![request()]).unwrap_err();
    assert!(
        matches!(
            err,
            ChatError::Net {
                attempts: 2,
                error: ragen_gym_net::NetError::Unreachable { .. }
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("{dead}/chat/completions")),
        "{err}"
    );
}

/// The scripted chat model: on turn k (the last `Turn k:` header of the prompt) it
/// moves `MOVES[(k - 1) % 4]`, in RAGEN's format without the forced `<think>` (the client
/// prepends it) and cut at the `</answer>` stop string, as OpenAI-style servers cut it.
const MOVES: [&str; 4] = ["Right", "Down", "Left", "Up"];

fn turn_of(body: &serde_json::Value) -> usize {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    let text = last["content"].as_str().unwrap();
    let at = text.rfind("\nTurn ").expect("a turn header") + "\nTurn ".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn eval_with_an_api_model_runs_the_validation_protocol_over_http() {
    // The first request is answered 503 (retried); every completion takes 100 ms, so 4 envs'
    // prompts at --concurrency 2 keep exactly 2 in flight.
    let server = ChatServer::start(
        Duration::from_millis(100),
        Box::new(|n, body| {
            if n == 0 {
                return (503, "overloaded".into());
            }
            let k = turn_of(body);
            (
                200,
                format!("Turn {k}, so I move.</think><answer>{}", MOVES[(k - 1) % 4]),
            )
        }),
    );
    let run = tempfile::tempdir().unwrap();
    let args = |run_dir: &std::path::Path| eval::Args {
        env: "sokoban".into(),
        policy: eval::PolicyKind::Random,
        episodes: 0,
        seed: 0,
        config: String::new(),
        json: true,
        model: Some("openai:mock".into()),
        set: vec![
            "es_manager.val.env_groups=4".into(),
            // the scripted model thinks; the CPU profile turns thinking off (`configs/cpu.toml`)
            "agent_proxy.enable_think=true".into(),
        ],
        no_cpu_profile: false,
        device: Default::default(),
        base_url: Some(server.base_url.clone()),
        // any variable the test process has stands in for the key
        api_key_env: "PATH".into(),
        continue_final_message: false,
        concurrency: 2,
        max_retries: 2,
        request_timeout: 30,
        max_response_bytes: 8 << 20,
        run_dir: Some(run_dir.to_path_buf()),
        sandbox: SandboxArgs::default(),
    };
    eval::run(args(run.path())).unwrap();

    // what went over the wire: RAGEN's prompts, the key from the variable, the stop string
    let seen = server.requests();
    let key = format!("Bearer {}", std::env::var("PATH").unwrap());
    for r in &seen {
        assert_eq!(r.authorization.as_deref(), Some(key.as_str()));
        let b = &r.body;
        assert_eq!(b["model"], "mock");
        assert_eq!(b["stop"], serde_json::json!(["</answer>"]), "{b}");
        assert_eq!(b["temperature"], 0.5, "rollout.val_temperature");
        let messages = b["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["role"], "user");
        let first = messages[1]["content"].as_str().unwrap();
        assert!(first.contains("Turn 1:\nState:\n"), "{first}");
        // the forced assistant prefix is not sent: the last message is the user's turn
        assert_eq!(messages.last().unwrap()["role"], "user");
    }
    assert_eq!(server.peak_in_flight(), 2, "--concurrency 2");

    // the trajectories: the scripted moves, the forced prefix and the stop string restored
    let trajs = std::fs::read_to_string(run.path().join("trajectories.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = trajs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let mut turns = 0;
    let mut successes = 0;
    for l in &lines {
        assert_eq!(l["plugin"], "sokoban");
        for (k, t) in l["turns"].as_array().unwrap().iter().enumerate() {
            let m = MOVES[k % 4];
            assert_eq!(
                t["response"].as_str().unwrap(),
                format!(
                    "<think>Turn {}, so I move.</think><answer>{m}</answer>",
                    k + 1
                )
            );
            assert_eq!(t["actions"], serde_json::json!([m]), "{t}");
            turns += 1;
        }
        successes += usize::from(l["success"].as_bool().unwrap());
    }
    // one request per turn, plus the retried 503
    assert_eq!(seen.len(), turns + 1);
    let metrics = std::fs::read_to_string(run.path().join("metrics.jsonl")).unwrap();
    let m: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert_eq!(m["val-env/success_rate"], successes as f64 / 4.0, "{m}");
    let lock = LockFile::read(&run.path().join("ragen-gym.lock")).unwrap();
    assert_eq!(lock.plugins[0].reference, "sokoban");
    assert_eq!(
        lock.plugins[0].digest.hex(),
        lines[0]["plugin_sha256"].as_str().unwrap()
    );

    // and the API-driven episodes replay identically on the env
    replay::run(replay::Args {
        run_dir: run.path().to_path_buf(),
        trajectory: None,
        env: None,
        sandbox: SandboxArgs::default(),
    })
    .unwrap();

    // a server that keeps failing: the command fails naming the URL
    let down = ChatServer::start(Duration::ZERO, Box::new(|_, _| (500, "boom".into())));
    let mut a = args(tempfile::tempdir().unwrap().path());
    a.base_url = Some(down.base_url.clone());
    a.max_retries = 1;
    a.run_dir = None;
    let err = format!("{:#}", eval::run(a).unwrap_err());
    assert!(
        err.contains(&format!("{}/chat/completions", down.base_url)),
        "{err}"
    );
    assert!(err.contains("HTTP 500"), "{err}");
}
