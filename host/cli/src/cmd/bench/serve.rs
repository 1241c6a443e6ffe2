//! `ragen-gym bench serve`: `ragen-gym serve` driven by N concurrent clients next to in-process
//! batch-N sampling of the same prompts, alternating in one run (`docs/benchmarks.md`, "Serving").
//!
//! Each round has its own prompts (a round's prompts are not in the prefix cache from an
//! earlier round on either side). The server side: N client threads, each sending its share of
//! the round's requests one after another over HTTP (a fresh connection each), greedy with
//! `max_tokens` new tokens. The in-process side: the same prompts in calls of N rows, with a
//! prefix cache as the server's. Both count the tokens they generated; latency is per request
//! (in process, a request's latency is its call's).

use super::super::serve;
use anyhow::Context;
use ragen_gym_policy as pol;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Arguments of `bench serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The model (as `serve --model`; default: the installed SmolLM2-135M-Instruct).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Concurrent clients (and the in-process batch size).
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Requests per client per round.
    #[arg(long, default_value_t = 2)]
    pub requests: usize,
    /// New tokens per request (greedy).
    #[arg(long = "max-tokens", default_value_t = 32)]
    pub max_tokens: usize,
    /// Rounds; each runs both sides, alternating which goes first.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What one side measured.
#[derive(Default)]
struct Side {
    tokens: usize,
    wall: Duration,
    latencies: Vec<f64>,
}

impl Side {
    fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort_by(f64::total_cmp);
        if l.is_empty() {
            return 0.0;
        }
        l[((p * (l.len() - 1) as f64).round() as usize).min(l.len() - 1)]
    }

    fn json(&self) -> serde_json::Value {
        json!({"tokens": self.tokens, "seconds": self.wall.as_secs_f64(),
            "tokens_per_s": self.tokens_per_s(), "latency_p50_s": self.percentile(0.5),
            "latency_p90_s": self.percentile(0.9), "latency_p99_s": self.percentile(0.99)})
    }
}

/// The user messages of round `r`: distinct questions of similar length.
fn questions(r: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("Round {r}, question {i}: name a colour and say why you like it, in one short sentence."))
        .collect()
}

/// One request over HTTP: its latency and completion tokens.
fn request(addr: SocketAddr, body: &str) -> anyhow::Result<(f64, usize)> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let latency = t.elapsed().as_secs_f64();
    let (head, body) = raw.split_once("\r\n\r\n").context("no HTTP response")?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200"),
        "serve answered {head}: {body}"
    );
    let v: serde_json::Value = serde_json::from_str(body)?;
    let tokens = v["usage"]["completion_tokens"]
        .as_u64()
        .context("no usage")?;
    Ok((latency, tokens as usize))
}

/// The server side of a round: `clients` threads share the questions.
fn via_server(addr: SocketAddr, name: &str, a: &ServeArgs, qs: &[String]) -> anyhow::Result<Side> {
    let t = Instant::now();
    let results: Vec<anyhow::Result<Vec<(f64, usize)>>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.clients)
            .map(|c| {
                let mine: Vec<String> = qs.iter().skip(c).step_by(a.clients).cloned().collect();
                sc.spawn(move || {
                    mine.iter()
                        .map(|q| {
                            let body = json!({"model": name, "temperature": 0,
                                "max_tokens": a.max_tokens,
                                "messages": [{"role": "user", "content": q}]});
                            request(addr, &body.to_string())
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let mut side = Side {
        wall: t.elapsed(),
        ..Side::default()
    };
    for r in results {
        for (latency, tokens) in r? {
            side.latencies.push(latency);
            side.tokens += tokens;
        }
    }
    Ok(side)
}

/// The in-process side of a round: calls of `clients` rows, one prefix cache.
fn in_process(
    model: &pol::LlamaModel,
    tok: &pol::Tokenizer,
    cache: &mut pol::PrefixCache,
    a: &ServeArgs,
    qs: &[String],
) -> anyhow::Result<Side> {
    let params = pol::SamplingParams {
        temperature: 0.0,
        max_new_tokens: a.max_tokens,
        ..Default::default()
    };
    let prompts = qs
        .iter()
        .map(|q| {
            let mut m = Vec::new();
            if let Some(sys) = tok.default_system_prompt() {
                m.push(pol::Message::system(sys));
            }
            m.push(pol::Message::user(q.clone()));
            tok.encode_chat(&m, true)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut side = Side::default();
    let t = Instant::now();
    for chunk in prompts.chunks(a.clients.max(1)) {
        let c = Instant::now();
        let out = if model.shares_prefixes() {
            pol::sample_cached(model, tok, chunk, &params, None, cache)?
        } else {
            pol::sample(model, tok, chunk, &params)?
        };
        let latency = c.elapsed().as_secs_f64();
        side.latencies
            .extend(std::iter::repeat_n(latency, chunk.len()));
        side.tokens += out.iter().map(|s| s.tokens.len()).sum::<usize>();
    }
    side.wall = t.elapsed();
    Ok(side)
}

/// Run the benchmark.
pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let mut sargs = serve::Args::for_model(&a.model);
    sargs.max_batch = a.clients;
    let server = serve::start(&sargs)?;
    let device = sargs.device.open()?;
    let (model, tok, _) = crate::shared::model::load_model(&a.model, &device)?;
    let mut cache = pol::PrefixCache::new(sargs.prefix_cache_mib << 20);
    let (mut srv, mut local) = (Side::default(), Side::default());
    let n = a.clients * a.requests;
    for r in 0..a.rounds {
        let qs = questions(r, n);
        let go_server = || via_server(server.addr, &server.name, &a, &qs);
        let (s, l) = if r % 2 == 0 {
            let s = go_server()?;
            (s, in_process(&model, &tok, &mut cache, &a, &qs)?)
        } else {
            let l = in_process(&model, &tok, &mut cache, &a, &qs)?;
            (go_server()?, l)
        };
        for (acc, x) in [(&mut srv, s), (&mut local, l)] {
            acc.tokens += x.tokens;
            acc.wall += x.wall;
            acc.latencies.extend(x.latencies);
        }
    }
    let ratio = srv.tokens_per_s() / local.tokens_per_s().max(1e-9);
    if a.json {
        let v = json!({"model": a.model, "clients": a.clients, "requests": n * a.rounds,
            "max_tokens": a.max_tokens, "serve": srv.json(), "in_process": local.json(),
            "ratio": ratio});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} clients x {} requests x {} rounds, greedy, {} new tokens at most",
            a.clients, a.requests, a.rounds, a.max_tokens
        );
        for (label, s) in [("serve", &srv), ("in-process", &local)] {
            println!(
                "{label:<11} {:>8.1} tokens/s ({} tokens in {:.1} s)  latency p50 {:.2} s  p90 {:.2} s  p99 {:.2} s",
                s.tokens_per_s(),
                s.tokens,
                s.wall.as_secs_f64(),
                s.percentile(0.5),
                s.percentile(0.9),
                s.percentile(0.99)
            );
        }
        println!(
            "ratio       {ratio:.2}x (serve / in-process batch-{})",
            a.clients
        );
    }
    Ok(())
}
