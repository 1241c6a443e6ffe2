//! `ragen-gym serve [RUN_DIR | --model M] [--host H] [--port P] [--api-key-env VAR]`: an
//! OpenAI-compatible chat server for a model (`default`, a `.gguf`, a Hugging Face directory, a
//! run or checkpoint directory with its LoRA adapter): `GET /health`, `GET /v1/models`,
//! `POST /v1/chat/completions` (OpenAI API reference, "Chat"; `stream: true` as server-sent
//! events). Concurrent requests are batched into sampler calls ([`batcher`]); the chat template
//! is the model's ChatML, as the rollout's; bad requests get OpenAI-shaped 400s naming the
//! field ([`request`], [`error`]).
//!
//! It binds to loopback unless `--host` says otherwise, and then only with `--api-key-env`
//! (every `/v1` request must send that key as a bearer token). `--port 0` takes a free port; the
//! bound address is printed on the first line of stdout.

pub mod batcher;
pub mod error;
pub mod request;
pub mod response;
pub mod routes;

use crate::shared::device::DeviceArgs;
use crate::shared::model::load_model;
use anyhow::Context;
use batcher::{BatchPolicy, Batcher, Call};
use ragen_gym_policy as pol;
use request::Caps;
use routes::AppState;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `ragen-gym serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A run directory to serve (its latest checkpoint); the same as `--model RUN_DIR`.
    #[arg(value_name = "RUN_DIR", conflicts_with = "model")]
    pub run: Option<PathBuf>,
    /// The model: `default` (the default), a run or checkpoint directory, a Hugging Face
    /// directory (with or without a LoRA adapter) or a `.gguf` file.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The address to bind. Anything but loopback needs `--api-key-env`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// The port (0: any free port; the bound address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The environment variable holding the API key every `/v1` request must send as
    /// `Authorization: Bearer KEY` (required with a non-loopback `--host`).
    #[arg(long = "api-key-env", value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The model's name in requests and responses (default: the `--model` or RUN_DIR as given,
    /// as vLLM names a served model by its path).
    #[arg(long = "served-model-name", value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Largest `max_tokens` a request may ask for (also the default; 1 to 2^20).
    #[arg(long = "max-tokens", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_tokens: usize,
    /// Largest `n` (1 to 128).
    #[arg(long = "max-n", default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=128))]
    pub max_n: usize,
    /// Largest request body, bytes (a larger one gets HTTP 413; 1 to 2^30).
    #[arg(long = "max-body-bytes", default_value_t = 1 << 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub max_body_bytes: usize,
    /// Most choices sampled in one round of sampler calls (1 to 4096).
    #[arg(long = "max-batch", default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub max_batch: usize,
    /// Milliseconds the batcher waits for more requests after the first of a call.
    #[arg(long = "batch-window-ms", default_value_t = 5)]
    pub batch_window_ms: u64,
    /// Requests waiting at most; more get HTTP 429.
    #[arg(long = "queue", default_value_t = 256)]
    pub queue: usize,
    /// MiB of keys and values the prefix cache keeps across requests (0: no prefix sharing).
    /// Prefix sharing runs on the CPU in f32 only.
    #[arg(long = "prefix-cache-mib", default_value_t = 256)]
    pub prefix_cache_mib: usize,
    /// The seed of the first request without `seed` (the next get the following seeds).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where the model runs.
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl Args {
    /// Loopback defaults for `model` (tests and `bench serve`).
    pub fn for_model(model: &str) -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: Args,
        }
        let mut a = P::parse_from(["serve", "--port", "0"]).a;
        a.model = Some(model.to_string());
        a
    }

    fn model_spec(&self) -> String {
        match (&self.run, &self.model) {
            (Some(r), _) => r.display().to_string(),
            (None, Some(m)) => m.clone(),
            (None, None) => "default".into(),
        }
    }

    /// The key from `--api-key-env`, refusing a non-loopback host without one.
    fn api_key(&self) -> anyhow::Result<Option<String>> {
        let key = match &self.api_key_env {
            Some(var) => {
                let k = std::env::var(var).unwrap_or_default();
                anyhow::ensure!(
                    !k.is_empty(),
                    "--api-key-env {var}: the variable is unset or empty"
                );
                Some(k)
            }
            None => None,
        };
        anyhow::ensure!(
            self.host.is_loopback() || key.is_some(),
            "--host {} is not a loopback address: serving beyond this machine needs \
             --api-key-env VAR (a bearer key every request must send)",
            self.host
        );
        Ok(key)
    }
}

/// A running server.
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// The served model's name.
    pub name: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// The API base, `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Block until the server stops (it stops on an I/O error of the listener).
    ///
    /// # Errors
    /// The listener's error.
    pub fn wait(mut self) -> anyhow::Result<()> {
        let t = self.thread.take().expect("joined once");
        t.join()
            .map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?
            .context("serving failed")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The sampler of the batching thread: `model` with a prefix cache of `cache_bytes` when it
/// can share prefixes.
fn sampler(
    model: pol::LlamaModel,
    tokenizer: pol::Tokenizer,
    cache_bytes: usize,
) -> impl FnMut(Call<'_>) -> Result<Vec<pol::Sample>, String> + Send + 'static {
    let mut cache =
        (cache_bytes > 0 && model.shares_prefixes()).then(|| pol::PrefixCache::new(cache_bytes));
    move |c: Call<'_>| {
        pol::sample_seeded(
            &model,
            &tokenizer,
            &c.prompts,
            c.params,
            &c.rows,
            cache.as_mut(),
        )
        .map_err(|e| e.to_string())
    }
}

/// Load the model and start serving (in background threads).
///
/// # Errors
/// A model that does not load, a refused `--host`, a port that cannot be bound.
pub fn start(args: &Args) -> anyhow::Result<Running> {
    let api_key = args.api_key()?;
    let device = args.device.open()?;
    let spec = args.model_spec();
    let (model, tokenizer, source) = load_model(&spec, &device)?;
    let name = args.served_model_name.clone().unwrap_or(spec);
    let context = model.config().max_position_embeddings;
    let batcher = Batcher::spawn(
        BatchPolicy {
            window: Duration::from_millis(args.batch_window_ms),
            max_rows: args.max_batch,
            queue: args.queue,
        },
        sampler(model, tokenizer.clone(), args.prefix_cache_mib << 20),
    )?;
    let state = Arc::new(AppState {
        name: name.clone(),
        tokenizer,
        context,
        batcher,
        caps: Caps {
            max_tokens: args.max_tokens.max(1),
            max_n: args.max_n,
        },
        max_body: args.max_body_bytes,
        api_key,
        base_seed: args.seed,
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        counters: Default::default(),
    });
    let listener = std::net::TcpListener::bind((args.host, args.port))
        .with_context(|| format!("failed to bind {}:{}", args.host, args.port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = routes::router(state);
    let thread = std::thread::Builder::new()
        .name("serve-http".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.await;
                    })
                    .await
            })
        })?;
    tracing::info!(model = %source.display(), %addr, "serving");
    Ok(Running {
        addr,
        name,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

/// Run the subcommand: serve until killed.
pub fn run(args: Args) -> anyhow::Result<()> {
    let running = start(&args)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "serving {} on {} (POST {}/chat/completions)",
        running.name,
        running.addr,
        running.base_url()
    )?;
    out.flush()?;
    drop(out);
    running.wait()
}
