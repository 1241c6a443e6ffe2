//! `ragen-gym serve` (README, "Serving a model"): OpenAI's shapes and errors over real HTTP on
//! loopback, its batching, and the check that matters: greedy `eval --model openai:NAME`
//! against `serve` plays exactly the episodes of in-process `eval` on the same seeds.

use ragen_gym_cli::cmd::eval;
use ragen_gym_cli::cmd::serve;
use ragen_gym_cli::shared::model::load_model;
use ragen_gym_cli::shared::sandbox::SandboxArgs;
use ragen_gym_policy as pol;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// One HTTP/1.1 request (`Connection: close`); the status and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let auth = auth.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

fn post(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, text) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        None,
        &body.to_string(),
    );
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A server for `model` on a free loopback port.
fn start(model: &Path, name: &str, tweak: impl FnOnce(&mut serve::Args)) -> serve::Running {
    let mut a = serve::Args::for_model(&model.display().to_string());
    a.served_model_name = Some(name.into());
    tweak(&mut a);
    serve::start(&a).unwrap()
}

const SYSTEM: &str = "You are a helpful assistant.";

fn chat(extra: Value) -> Value {
    let mut v = json!({"model": "tiny", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which way?"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn serve_answers_in_openais_shapes_samples_as_in_process_and_names_bad_fields() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    let s = start(&model, "tiny", |a| a.max_body_bytes = 4096);
    let (st, health) = http(s.addr, "GET", "/health", None, "");
    assert_eq!(
        (
            st,
            &serde_json::from_str::<Value>(&health).unwrap()["status"]
        ),
        (200, &json!("ok"))
    );
    let (st, models) = http(s.addr, "GET", "/v1/models", None, "");
    assert_eq!(st, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&models).unwrap()["data"][0]["id"],
        "tiny"
    );

    // sampled choices are those of in-process sampling with the same seed: choice j is stream j
    let (st, r) = post(
        s.addr,
        &chat(json!({"temperature": 1.0, "seed": 5, "n": 2,
        "max_tokens": 12, "logprobs": true})),
    );
    assert_eq!(st, 200, "{r}");
    let (m, tok, _) = load_model(&model.display().to_string(), &pol::Device::Cpu).unwrap();
    let tok = &tok;
    let prompt = tok
        .encode_chat(
            &[
                pol::Message::system(SYSTEM),
                pol::Message::user("Which way?"),
            ],
            true,
        )
        .unwrap();
    let params = pol::SamplingParams {
        temperature: 1.0,
        max_new_tokens: 12,
        seed: 5,
        ..Default::default()
    };
    let local = pol::sample(&m, tok, &[prompt.clone(), prompt.clone()], &params).unwrap();
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["model"], "tiny");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    for (j, l) in local.iter().enumerate() {
        let c = &r["choices"][j];
        assert_eq!(c["index"], j);
        assert_eq!(c["message"]["role"], "assistant");
        assert_eq!(c["message"]["content"], l.text.as_str(), "choice {j}");
        let lps: Vec<f64> = c["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap())
            .collect();
        assert_eq!(
            lps.len(),
            l.tokens.len() - usize::from(l.finish_reason == pol::FinishReason::Stop)
        );
        // the server shares prefixes (sample_cached): log-probs within float rounding
        for (a, b) in lps.iter().zip(&l.logprobs) {
            assert!((a - f64::from(*b)).abs() < 1e-4, "{a} vs {b}");
        }
    }
    assert_ne!(r["choices"][0]["message"], r["choices"][1]["message"]);
    let completion: usize = local.iter().map(|l| l.tokens.len()).sum();
    assert_eq!(
        r["usage"],
        json!({"prompt_tokens": prompt.len(), "completion_tokens": completion,
        "total_tokens": prompt.len() + completion})
    );

    // streaming: the same text in chat.completion.chunk events, then [DONE]
    let greedy = chat(json!({"temperature": 0, "max_tokens": 10}));
    let (_, whole) = post(s.addr, &greedy);
    let mut streamed = greedy.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (st, events) = http(
        s.addr,
        "POST",
        "/v1/chat/completions",
        None,
        &streamed.to_string(),
    );
    assert_eq!(st, 200);
    let data: Vec<&str> = events
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks.last().unwrap()["usage"], whole["usage"]);

    // bad requests: OpenAI-shaped errors naming the field
    for (extra, param) in [
        (json!({"temperature": 5}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"max_tokens": 100000}), "max_tokens"),
        (json!({"n": 0}), "n"),
        (json!({"stop": 3}), "stop"),
        (json!({"seed": "x"}), "seed"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].role",
        ),
    ] {
        let (st, e) = post(s.addr, &chat(extra.clone()));
        assert_eq!(st, 400, "{extra}: {e}");
        assert_eq!(e["error"]["param"], param, "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error");
    }
    let (st, e) = post(s.addr, &chat(json!({"model": "gpt-4o"})));
    assert_eq!((st, &e["error"]["code"]), (404, &json!("model_not_found")));
    let (st, e) = http(s.addr, "POST", "/v1/chat/completions", None, "{\"model\": ");
    assert_eq!(st, 400, "{e}");
    let long = "x".repeat(5000);
    let (st, e) = post(
        s.addr,
        &chat(json!({"messages": [{"role": "user", "content": long}]})),
    );
    assert_eq!(st, 413, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("4096"),
        "{e}"
    );
    let (st, e) = http(s.addr, "GET", "/v2/nothing", None, "");
    assert_eq!(st, 404);
    assert!(e.contains("/v2/nothing"), "{e}");
    // the server still answers
    assert_eq!(post(s.addr, &greedy).1["choices"], whole["choices"]);
}

#[test]
fn a_key_guards_v1_and_only_loopback_goes_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    // any variable the test process has stands in for the key
    let key = std::env::var("PATH").unwrap();
    let s = start(&model, "tiny", |a| a.api_key_env = Some("PATH".into()));
    let (st, e) = http(s.addr, "GET", "/v1/models", None, "");
    assert_eq!(st, 401, "{e}");
    assert_eq!(http(s.addr, "GET", "/v1/models", Some("wrong"), "").0, 401);
    assert_eq!(http(s.addr, "GET", "/v1/models", Some(&key), "").0, 200);
    let body = chat(json!({"temperature": 0, "max_tokens": 2})).to_string();
    assert_eq!(
        http(s.addr, "POST", "/v1/chat/completions", None, &body).0,
        401
    );
    assert_eq!(
        http(s.addr, "POST", "/v1/chat/completions", Some(&key), &body).0,
        200
    );
    assert_eq!(http(s.addr, "GET", "/health", None, "").0, 200);
    let mut open = serve::Args::for_model(&model.display().to_string());
    open.host = "0.0.0.0".parse().unwrap();
    let err = serve::start(&open).err().unwrap().to_string();
    assert!(err.contains("--api-key-env"), "{err}");
}

#[test]
fn concurrent_requests_share_sampler_calls_and_a_gone_client_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    let s = start(&model, "tiny", |a| a.batch_window_ms = 300);
    let ask = |i: usize| {
        chat(json!({"temperature": 0, "max_tokens": 6,
        "messages": [{"role": "user", "content": format!("Question {i}?")}]}))
    };
    let alone: Vec<Value> = (0..6)
        .map(|i| post(s.addr, &ask(i)).1["choices"].clone())
        .collect();
    let calls_before = health(s.addr)["sampler_calls"].as_u64().unwrap();
    let together: Vec<Value> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6)
            .map(|i| sc.spawn(move || post(s.addr, &ask(i)).1["choices"].clone()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(together, alone);
    let h = health(s.addr);
    let calls = h["sampler_calls"].as_u64().unwrap() - calls_before;
    assert!(
        calls < 6 && h["peak_rows_per_call"].as_u64().unwrap() >= 2,
        "{h}"
    );

    // a client that sends a request and goes away inside the batching window: dropped
    let mut c = TcpStream::connect(s.addr).unwrap();
    let body = ask(9).to_string();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
        Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(c);
    assert!(
        crate::servers::wait_until(Duration::from_secs(5), || {
            health(s.addr)["dropped_requests"] == 1
        }),
        "{}",
        health(s.addr)
    );
}

fn health(addr: SocketAddr) -> Value {
    serde_json::from_str(&http(addr, "GET", "/health", None, "").1).unwrap()
}

/// `eval --model MODEL` with greedy validation on `env`, in process or (with `base_url`)
/// through the API; the run directory's trajectories.
fn eval_run(env: &str, model: &str, base_url: Option<String>, set: &[&str]) -> Vec<Value> {
    let run = tempfile::tempdir().unwrap();
    let mut sets: Vec<String> = [
        "rollout.val_temperature=0",
        "rollout.constrained_actions=false",
    ]
    .iter()
    .chain(set)
    .map(|s| s.to_string())
    .collect();
    sets.sort();
    let args = eval::Args {
        env: env.into(),
        policy: eval::PolicyKind::Random,
        episodes: 0,
        seed: 0,
        config: String::new(),
        json: true,
        model: Some(model.into()),
        set: sets,
        no_cpu_profile: false,
        device: Default::default(),
        base_url,
        api_key_env: "RAGEN_TEST_NO_KEY".into(),
        continue_final_message: true,
        concurrency: 16,
        max_retries: 0,
        request_timeout: 300,
        max_response_bytes: 8 << 20,
        run_dir: Some(run.path().to_path_buf()),
        sandbox: SandboxArgs::default(),
    };
    eval::run(args).unwrap();
    std::fs::read_to_string(run.path().join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Per episode: its seed, each turn's response and actions, and its success.
fn episodes(trajs: &[Value]) -> Vec<Value> {
    trajs
        .iter()
        .map(|t| {
            let turns: Vec<Value> = t["turns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| json!([u["response"], u["actions"]]))
                .collect();
            json!({"seed": t["seed"], "turns": turns, "success": t["success"]})
        })
        .collect()
}

fn same_both_ways(env: &str, model: &Path, set: &[&str]) -> Vec<Value> {
    let spec = model.display().to_string();
    let local = episodes(&eval_run(env, &spec, None, set));
    let s = start(model, "agent", |_| {});
    let api = episodes(&eval_run(env, "openai:agent", Some(s.base_url()), set));
    assert_eq!(api.len(), local.len());
    for (a, l) in api.iter().zip(&local) {
        assert_eq!(a, l);
    }
    local
}

#[test]
fn greedy_eval_through_serve_plays_the_in_process_episodes() {
    // a tiny random model on two-turn Sokoban: the same responses, actions and successes
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    let eps = same_both_ways(
        "sokoban",
        &model,
        &["es_manager.val.env_groups=4", "rollout.response_length=24"],
    );
    assert_eq!(eps.len(), 4);
    assert!(
        eps.iter()
            .all(|e| e["turns"].as_array().unwrap().len() == 2),
        "{eps:?}"
    );
    // the default model (SmolLM2-135M): the same text both ways. Greedy and unconstrained it
    // rarely closes its answer (it repeats the prompt's "Dragon, Phoenix" line), so most
    // episodes take no action; what is compared is the text the model wrote.
    let eps = same_both_ways(
        "bandit",
        &pol::default_model_path(),
        &["es_manager.val.env_groups=8"],
    );
    assert_eq!(eps.len(), 8);
    assert!(
        eps.iter().all(|e| e["turns"][0][0]
            .as_str()
            .is_some_and(|r| r.len() > "<answer>".len())),
        "{eps:?}"
    );
}

#[test]
fn the_openai_python_client_chats_with_serve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/setup.sh",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let model = crate::tiny_model(dir.path());
    let s = start(&model, "tiny", |_| {});
    let out = std::process::Command::new(&python)
        .arg(root.join("tests/fixtures/openai_chat.py"))
        .args([s.base_url(), "tiny".into()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (_, direct) = post(s.addr, &chat(json!({"temperature": 0, "max_tokens": 10})));
    assert_eq!(v["models"], json!(["tiny"]));
    assert_eq!(v["content"], direct["choices"][0]["message"]["content"]);
    assert_eq!(v["streamed"], v["content"]);
    assert_eq!(v["usage"], direct["usage"]);
    assert_eq!(v["stream_usage"], direct["usage"]);
    assert_eq!(
        v["logprobs"],
        direct["usage"]["completion_tokens"].as_u64().unwrap()
            - u64::from(v["finish_reason"] == "stop")
    );
    assert_eq!(v["error"]["status"], 400);
    assert_eq!(v["error"]["body"]["param"], "top_p");
}
