//! Chat completions in OpenAI's shapes (OpenAI API reference, "The chat completion object" and
//! "The chat completion chunk object"): the whole response, or its server-sent events.

use ragen_gym_policy::{FinishReason, Sample, Tokenizer};
use serde_json::{Value, json};

/// One returned choice: the text cut at the first stop string (OpenAI leaves stop strings out),
/// its finish reason, and the log-probs of its tokens when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The text.
    pub text: String,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// `{"content": [{token, logprob, bytes, top_logprobs}]}`, when asked for.
    pub logprobs: Option<Value>,
    /// Tokens generated (with a final end-of-turn token).
    pub tokens: usize,
}

/// The text of `s` up to its first stop string.
fn cut_at_stop(text: &str, stop: &[String]) -> String {
    let at = stop.iter().filter_map(|st| text.find(st.as_str())).min();
    at.map_or_else(|| text.to_string(), |i| text[..i].to_string())
}

/// OpenAI's `logprobs.content`: every generated token but a final end-of-turn token, its
/// text, its log-prob under the model (temperature 1, before top_p; as `Sample::logprobs`) and
/// its UTF-8 bytes.
fn logprobs(s: &Sample, tok: &Tokenizer) -> Value {
    let n = if s.finish_reason == FinishReason::Stop {
        s.tokens.len().saturating_sub(1)
    } else {
        s.tokens.len()
    };
    let content: Vec<Value> = s.tokens[..n]
        .iter()
        .zip(&s.logprobs)
        .map(|(&id, &lp)| {
            let bytes = tok.token_bytes(id).unwrap_or_default();
            json!({
                "token": String::from_utf8_lossy(&bytes),
                "logprob": lp,
                "bytes": bytes,
                "top_logprobs": [],
            })
        })
        .collect();
    json!({ "content": content })
}

impl Choice {
    /// The choice of a sample under `stop`.
    pub fn of(s: &Sample, stop: &[String], with_logprobs: bool, tok: &Tokenizer) -> Self {
        Self {
            text: cut_at_stop(&s.text, stop),
            finish_reason: match s.finish_reason {
                FinishReason::Stop | FinishReason::StopString => "stop",
                FinishReason::Length => "length",
            },
            logprobs: with_logprobs.then(|| logprobs(s, tok)),
            tokens: s.tokens.len(),
        }
    }
}

/// What identifies a completion.
#[derive(Debug, Clone)]
pub struct Head {
    /// `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
}

fn usage(head: &Head, choices: &[Choice]) -> Value {
    let completion: usize = choices.iter().map(|c| c.tokens).sum();
    json!({
        "prompt_tokens": head.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": head.prompt_tokens + completion,
    })
}

/// The `chat.completion` object.
pub fn completion(head: &Head, choices: &[Choice]) -> Value {
    let list: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": c.logprobs,
                "finish_reason": c.finish_reason,
            })
        })
        .collect();
    json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "system_fingerprint": null,
        "choices": list,
        "usage": usage(head, choices),
    })
}

fn chunk(head: &Head, choices: Value) -> Value {
    json!({
        "id": head.id,
        "object": "chat.completion.chunk",
        "created": head.created,
        "model": head.model,
        "system_fingerprint": null,
        "choices": choices,
    })
}

/// The server-sent events of a streamed completion (the WHATWG HTML standard, "Server-sent
/// events": `data: ...` lines, a blank line after each event), as OpenAI streams them: per
/// choice a chunk with the role, one with the content (and its log-probs), one with the finish
/// reason; with `include_usage` a last chunk with no choices and the usage; then `[DONE]`.
pub fn events(head: &Head, choices: &[Choice], include_usage: bool) -> String {
    let mut out = String::new();
    let mut push = |v: Value| {
        out.push_str("data: ");
        out.push_str(&v.to_string());
        out.push_str("\n\n");
    };
    for (i, c) in choices.iter().enumerate() {
        push(chunk(
            head,
            json!([{"index": i, "delta": {"role": "assistant", "content": ""},
                "logprobs": null, "finish_reason": null}]),
        ));
        push(chunk(
            head,
            json!([{"index": i, "delta": {"content": c.text},
                "logprobs": c.logprobs, "finish_reason": null}]),
        ));
        push(chunk(
            head,
            json!([{"index": i, "delta": {}, "logprobs": null,
                "finish_reason": c.finish_reason}]),
        ));
    }
    if include_usage {
        let mut last = chunk(head, json!([]));
        last["usage"] = usage(head, choices);
        push(last);
    }
    out.push_str("data: [DONE]\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        Head {
            id: "chatcmpl-1".into(),
            created: 5,
            model: "m".into(),
            prompt_tokens: 10,
        }
    }

    fn choice(text: &str) -> Choice {
        Choice {
            text: text.into(),
            finish_reason: "stop",
            logprobs: None,
            tokens: 3,
        }
    }

    #[test]
    fn stop_strings_are_cut_at_the_first() {
        let stop = vec!["</answer>".to_string(), "\n\n".to_string()];
        assert_eq!(cut_at_stop("<answer>Up</answer>\n", &stop), "<answer>Up");
        assert_eq!(cut_at_stop("a\n\nb</answer>", &stop), "a");
        assert_eq!(cut_at_stop("none", &stop), "none");
    }

    #[test]
    fn the_completion_and_its_events_have_openais_shape() {
        let c = completion(&head(), &[choice("hi"), choice("yo")]);
        assert_eq!(c["object"], "chat.completion");
        assert_eq!(c["choices"][1]["index"], 1);
        assert_eq!(c["choices"][1]["message"]["content"], "yo");
        assert_eq!(c["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            c["usage"],
            json!({"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16})
        );
        let ev = events(&head(), &[choice("hi")], true);
        let data: Vec<&str> = ev
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap())
            .collect();
        assert_eq!(data.len(), 5);
        assert_eq!(data[4], "[DONE]");
        let v: Vec<Value> = data[..4]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert!(v.iter().all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(v[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(v[1]["choices"][0]["delta"]["content"], "hi");
        assert_eq!(v[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(v[3]["choices"], json!([]));
        assert_eq!(v[3]["usage"]["total_tokens"], 13);
    }
}
