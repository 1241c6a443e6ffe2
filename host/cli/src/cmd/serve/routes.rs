//! The HTTP side (axum): `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, and
//! OpenAI-shaped errors for everything else.

use super::batcher::{Batcher, Job, SubmitError};
use super::error::ApiError;
use super::request::{self, Caps, ChatRequest};
use super::response::{Choice, Head, completion, events};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ragen_gym_policy::{Message, Role, Tokenizer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;

/// What the handlers share.
pub struct AppState {
    /// The served model's name (`model` in requests and responses).
    pub name: String,
    /// The model's tokenizer (its chat template is applied here).
    pub tokenizer: Tokenizer,
    /// The model's context: prompt plus new tokens at most.
    pub context: usize,
    /// The batching task.
    pub batcher: Batcher,
    /// Limits on requests.
    pub caps: Caps,
    /// Largest body, bytes.
    pub max_body: usize,
    /// The bearer key every `/v1` request must send, if any.
    pub api_key: Option<String>,
    /// The seed of a request without one: this plus the count of such requests so far.
    pub base_seed: u64,
    /// Unix seconds at start (`created` of the model).
    pub started: u64,
    /// Completions so far (their ids) and unseeded requests so far.
    pub counters: [AtomicU64; 2],
}

/// The router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .fallback(|uri: Uri| async move { ApiError::NoRoute(uri.path().to_string()) })
        .with_state(state)
}

/// Byte strings equal, in time that depends only on their lengths.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl AppState {
    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match sent {
            Some(s) if same_key(s.trim().as_bytes(), key.as_bytes()) => Ok(()),
            _ => Err(ApiError::Unauthorized),
        }
    }

    /// The prompt's ids under the model's chat template (ChatML, with the template's default
    /// system message when the request has none, as Hugging Face's `apply_chat_template`
    /// renders it), and `max_tokens` fitted to the context when the request did not set it.
    fn prompt(&self, req: &mut ChatRequest) -> Result<Vec<u32>, ApiError> {
        let tok = &self.tokenizer;
        let internal = |e: ragen_gym_policy::PolicyError| ApiError::Server(e.to_string());
        let mut messages = req.messages.clone();
        if !messages.iter().any(|m| m.role == Role::System)
            && let Some(sys) = tok.default_system_prompt()
        {
            messages.insert(0, Message::system(sys));
        }
        let header = req.add_generation_prompt && req.continued.is_none();
        let mut ids = tok.encode_chat(&messages, header).map_err(internal)?;
        if let Some(text) = &req.continued {
            ids.extend(tok.encode_chat(&[], true).map_err(internal)?);
            ids.extend(tok.encode(text).map_err(internal)?);
        }
        if ids.is_empty() {
            return Err(ApiError::field("messages", "the prompt is empty"));
        }
        let room = self.context.saturating_sub(ids.len());
        if room == 0 {
            return Err(ApiError::field(
                "messages",
                format!(
                    "the prompt is {} tokens, the model's context {}",
                    ids.len(),
                    self.context
                ),
            ));
        }
        if req.sampling.max_tokens > room {
            if req.max_tokens_given {
                return Err(ApiError::field(
                    "max_tokens",
                    format!(
                        "the prompt ({} tokens) and `max_tokens` ({}) exceed the model's context of {}",
                        ids.len(),
                        req.sampling.max_tokens,
                        self.context
                    ),
                ));
            }
            req.sampling.max_tokens = room;
        }
        Ok(ids)
    }

    fn head(&self, prompt_tokens: usize) -> Head {
        let n = self.counters[0].fetch_add(1, Ordering::Relaxed);
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Head {
            id: format!("chatcmpl-{:x}{n:08x}", self.started),
            created,
            model: self.name.clone(),
            prompt_tokens,
        }
    }
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.batcher.stats;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    axum::Json(serde_json::json!({
        "status": "ok",
        "model": st.name,
        "sampler_calls": load(&s.calls),
        "sampled_rows": load(&s.rows),
        "peak_rows_per_call": load(&s.peak_rows),
        "dropped_requests": load(&s.dropped),
    }))
    .into_response()
}

async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = st.authorize(&headers) {
        return e.into_response();
    }
    axum::Json(serde_json::json!({
        "object": "list",
        "data": [{"id": st.name, "object": "model", "created": st.started, "owned_by": "ragen-gym"}],
    }))
    .into_response()
}

async fn chat(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    chat_result(&st, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat_result(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    st.authorize(headers)?;
    let bytes = axum::body::to_bytes(body, st.max_body)
        .await
        .map_err(|_| ApiError::TooLarge { limit: st.max_body })?;
    let mut req = request::parse(&bytes, &st.caps)?;
    if req.model != st.name {
        return Err(ApiError::ModelNotFound {
            asked: req.model,
            served: st.name.clone(),
        });
    }
    let prompt = st.prompt(&mut req)?;
    let prompt_tokens = prompt.len();
    let seed = req.seed.unwrap_or_else(|| {
        st.base_seed
            .wrapping_add(st.counters[1].fetch_add(1, Ordering::Relaxed))
    });
    let (reply, rx) = oneshot::channel();
    st.batcher
        .submit(Job {
            prompt,
            sampling: req.sampling.clone(),
            seed,
            n: req.n,
            reply,
        })
        .map_err(|e| match e {
            SubmitError::Full(queued) => ApiError::Busy { queued },
            SubmitError::Stopped => ApiError::Server(e.to_string()),
        })?;
    // Dropping this future (the client went away) drops `rx`; the batcher then skips the job.
    let samples = rx
        .await
        .map_err(|_| ApiError::Server("the sampler thread stopped".into()))?
        .map_err(ApiError::Server)?;
    let choices: Vec<Choice> = samples
        .iter()
        .map(|s| Choice::of(s, &req.sampling.stop, req.logprobs, &st.tokenizer))
        .collect();
    let head = st.head(prompt_tokens);
    if req.stream {
        let headers = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        Ok((headers, events(&head, &choices, req.include_usage)).into_response())
    } else {
        Ok(axum::Json(completion(&head, &choices)).into_response())
    }
}
