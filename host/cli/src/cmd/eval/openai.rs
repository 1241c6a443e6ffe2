//! A client for OpenAI-compatible chat endpoints (`POST {base}/chat/completions`; OpenAI's
//! Chat Completions API, which vLLM, llama.cpp's and llama-cpp-python's servers also serve):
//! many conversations at once with bounded concurrency (a tokio semaphore), retries with
//! exponential backoff on HTTP 429 and 5xx and on connection failures (honouring
//! `Retry-After`), and errors that name the URL. As RAGEN's `ConcurrentLLM`
//! (`ragen/llm_agent/base_llm.py`) does for its API providers.
//!
//! Requests go through the bounded client (`ragen_gym_net`): only the endpoint's own host is
//! contacted (a redirect elsewhere is refused), a response is read under a byte cap and a
//! minimum rate, and a request with all its retries ends by one overall deadline. An error that
//! quotes the server's body redacts the key in use.

use ragen_gym_net::{Client, Grants, Limits, Method, NetError, Url, header, redact_secret};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One chat message on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireMessage {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// One completion request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest {
    /// The model name the server knows.
    pub model: String,
    /// The conversation.
    pub messages: Vec<WireMessage>,
    /// Sampling temperature.
    pub temperature: f64,
    /// Nucleus mass.
    pub top_p: f64,
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampler seed (servers that support it are then reproducible).
    pub seed: u64,
    /// Stop strings (not included in the returned text).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Continue the last (assistant) message instead of starting a new one: vLLM's
    /// `continue_final_message` with `add_generation_prompt: false` (vLLM
    /// `entrypoints/openai/protocol.py::ChatCompletionRequest`; `ragen-gym serve` understands
    /// them too). Not sent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continue_final_message: bool,
    /// `false` with `continue_final_message`; not sent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
}

/// One completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The generated text.
    pub text: String,
    /// `stop` (end of turn or a stop string), `length`, ...
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireResponse {
    choices: Vec<WireChoice>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireReply,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireReply {
    content: Option<String>,
}

/// Why a chat request failed (after its retries).
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No complete response (connection refused, DNS), a bound hit (byte cap, deadline,
    /// minimum rate) or a refused redirect; the error names the URL and the bound.
    #[error("{error} ({})", attempts_text(*attempts))]
    Net {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        error: NetError,
    },
    /// An error status (after retries for 429 and 5xx).
    #[error("{url} answered HTTP {status} ({}): {body}", attempts_text(*attempts))]
    Status {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The start of the response body, the key redacted.
        body: String,
    },
    /// A 2xx response that is not a chat completion.
    #[error("{url} sent a response that is not a chat completion: {reason}")]
    Body {
        /// The endpoint.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The HTTP client or runtime could not start.
    #[error("failed to set up the HTTP client for {url}: {reason}")]
    Setup {
        /// The endpoint.
        url: String,
        /// Why.
        reason: String,
    },
}

/// `1 attempt`, `3 attempts`.
fn attempts_text(n: u32) -> String {
    if n == 1 {
        "1 attempt".into()
    } else {
        format!("{n} attempts")
    }
}

/// Retry schedule: attempt `k` (0-based) after a retryable failure waits
/// `min(max_delay, base_delay * 2^k)`, or the server's `Retry-After` when it says so (capped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First wait.
    pub base_delay: Duration,
    /// Longest wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry `k` (0-based), given the server's `Retry-After` seconds.
    pub fn delay(&self, k: u32, retry_after: Option<u64>) -> Duration {
        let backoff = self
            .base_delay
            .saturating_mul(1u32.checked_shl(k).unwrap_or(u32::MAX))
            .min(self.max_delay);
        retry_after.map_or(backoff, |s| Duration::from_secs(s).min(self.max_delay))
    }
}

/// Whether a status is worth retrying: rate limits and server errors.
pub fn retryable(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

struct Inner {
    url: Url,
    shown: String,
    api_key: Option<String>,
    net: Client,
    retry: RetryPolicy,
    permits: tokio::sync::Semaphore,
}

/// Bytes of an error body read at most, and characters of it quoted.
const ERROR_BODY_BYTES: usize = 64 << 10;
const QUOTED_CHARS: usize = 300;

/// An OpenAI-compatible chat client. Blocking methods over an owned current-thread runtime.
pub struct ChatClient {
    inner: Arc<Inner>,
    runtime: tokio::runtime::Runtime,
}

impl ChatClient {
    /// A client for `{base_url}/chat/completions` with at most `concurrency` requests in flight,
    /// `request_timeout` per attempt (its wait for response headers), an optional bearer
    /// `api_key`, and `limits` on every response (its deadline covers a request and all its
    /// retries).
    ///
    /// # Errors
    /// [`ChatError::Setup`].
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        concurrency: usize,
        request_timeout: Duration,
        retry: RetryPolicy,
        limits: Limits,
    ) -> Result<Self, ChatError> {
        let shown = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let setup = |reason: String| ChatError::Setup {
            url: shown.clone(),
            reason,
        };
        let url = Url::parse(&shown).map_err(|e| setup(format!("not a URL: {e}")))?;
        let limits = Limits {
            head_timeout: request_timeout,
            ..limits
        };
        let net = Client::new(Grants::only_origin_of(&url, "--base-url"), limits)
            .map_err(|e| setup(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| setup(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                url,
                shown,
                api_key,
                net,
                retry,
                permits: tokio::sync::Semaphore::new(concurrency.max(1)),
            }),
            runtime,
        })
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.inner.shown
    }

    /// Complete every request (concurrently, at most `concurrency` in flight); results in
    /// request order.
    ///
    /// # Errors
    /// The first request that failed after its retries.
    pub fn complete_all(&self, requests: Vec<ChatRequest>) -> Result<Vec<Completion>, ChatError> {
        self.runtime.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, req) in requests.into_iter().enumerate() {
                let inner = self.inner.clone();
                set.spawn(async move { (i, inner.complete(&req).await) });
            }
            let mut out: Vec<Option<Completion>> = vec![None; set.len()];
            while let Some(joined) = set.join_next().await {
                let (i, r) = joined.map_err(|e| ChatError::Setup {
                    url: self.inner.shown.clone(),
                    reason: format!("request task failed: {e}"),
                })?;
                out[i] = Some(r?);
            }
            Ok(out
                .into_iter()
                .map(|c| c.expect("every task joined"))
                .collect())
        })
    }
}

impl Inner {
    async fn complete(&self, req: &ChatRequest) -> Result<Completion, ChatError> {
        let _permit = self.permits.acquire().await.map_err(|e| ChatError::Setup {
            url: self.shown.clone(),
            reason: e.to_string(),
        })?;
        let deadline = self.net.deadline_from_now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let (retry_after, failure) = match self.attempt(req, attempt, deadline).await {
                Ok(Ok(completion)) => return Ok(completion),
                Ok(Err(failure)) => failure,
                Err(fatal) => return Err(fatal),
            };
            let wait = self.retry.delay(attempt - 1, retry_after);
            if attempt > self.retry.max_retries || Instant::now() + wait >= deadline {
                return Err(failure);
            }
            tracing::warn!(url = %self.shown, attempt, "chat request failed ({failure}); retrying in {wait:?}");
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt: the completion, a failure worth retrying (with the server's
    /// `Retry-After`), or a failure that ends the request.
    async fn attempt(
        &self,
        req: &ChatRequest,
        attempt: u32,
        deadline: Instant,
    ) -> Result<Result<Completion, (Option<u64>, ChatError)>, ChatError> {
        let net = |error: NetError| ChatError::Net {
            attempts: attempt,
            error,
        };
        let json = serde_json::to_vec(req).map_err(|e| ChatError::Setup {
            url: self.shown.clone(),
            reason: format!("failed to serialise the request: {e}"),
        })?;
        let mut builder = self
            .net
            .request(Method::POST, &self.url)
            .map_err(net)?
            .header(header::CONTENT_TYPE, "application/json")
            .body(json);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let resp = match self.net.send(builder, &self.url, deadline).await {
            Ok(r) => r,
            Err(e) if e.is_transient() => return Ok(Err((None, net(e)))),
            Err(e) => return Err(net(e)),
        };
        let status = resp.status();
        if (200..300).contains(&status) {
            let cap = self.net.limits().max_bytes;
            let body = match resp.bytes(cap).await {
                Ok(b) => b,
                Err(e) if e.is_transient() => return Ok(Err((None, net(e)))),
                Err(e) => return Err(net(e)),
            };
            return self.completion(&body).map(Ok);
        }
        let retry_after = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let text = resp.snippet(ERROR_BODY_BYTES).await;
        let failure = ChatError::Status {
            url: self.shown.clone(),
            status,
            attempts: attempt,
            body: redact_secret(&text, self.api_key.as_deref(), QUOTED_CHARS),
        };
        if retryable(status) {
            Ok(Err((retry_after, failure)))
        } else {
            Err(failure)
        }
    }

    /// The first choice of a chat-completion body.
    fn completion(&self, body: &[u8]) -> Result<Completion, ChatError> {
        let bad = |reason: String| ChatError::Body {
            url: self.shown.clone(),
            reason,
        };
        let body: WireResponse = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        let choice = body
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| bad("no choices".into()))?;
        Ok(Completion {
            text: choice.message.content.unwrap_or_default(),
            finish_reason: choice.finish_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_follows_retry_after() {
        let p = RetryPolicy {
            max_retries: 9,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(4),
        };
        let waits: Vec<u128> = (0..6).map(|k| p.delay(k, None).as_millis()).collect();
        assert_eq!(waits, vec![500, 1000, 2000, 4000, 4000, 4000]);
        assert_eq!(p.delay(0, Some(2)), Duration::from_secs(2));
        assert_eq!(p.delay(0, Some(600)), Duration::from_secs(4));
        assert!(retryable(429) && retryable(503) && retryable(500));
        assert!(!retryable(400) && !retryable(401) && !retryable(404));
    }

    #[test]
    fn requests_serialise_as_chat_completions() {
        let r = ChatRequest {
            model: "m".into(),
            messages: vec![WireMessage {
                role: "user",
                content: "hi".into(),
            }],
            temperature: 0.5,
            top_p: 1.0,
            max_tokens: 64,
            seed: 7,
            stop: vec!["</answer>".into()],
            continue_final_message: false,
            add_generation_prompt: None,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "temperature": 0.5, "top_p": 1.0, "max_tokens": 64, "seed": 7, "stop": ["</answer>"]})
        );
    }
}
