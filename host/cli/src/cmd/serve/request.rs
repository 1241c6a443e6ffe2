//! A `POST /v1/chat/completions` body, checked field by field (OpenAI API reference, "Create
//! chat completion"): every refusal is a 400 naming the field. Two fields of vLLM's
//! OpenAI-compatible server are understood as well, `add_generation_prompt` and
//! `continue_final_message` (vLLM `entrypoints/openai/protocol.py::ChatCompletionRequest`): the
//! last assistant message is then continued instead of a new one started, which is how
//! `eval --model openai:NAME --continue-final-message` sends the rollout's forced `<answer>`.

use super::error::ApiError;
use ragen_gym_policy::Message;
use serde_json::{Map, Value};

/// Limits on a request.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Largest `max_tokens` (also the default).
    pub max_tokens: usize,
    /// Largest `n`.
    pub max_n: usize,
}

/// How the choices of a request are sampled: requests with equal sampling run in one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 is greedy.
    pub temperature: f64,
    /// Nucleus mass (1 when greedy, where it does not matter).
    pub top_p: f64,
    /// Most new tokens per choice.
    pub max_tokens: usize,
    /// Stop strings (cut from the returned text).
    pub stop: Vec<String>,
}

/// A checked chat request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The model asked for.
    pub model: String,
    /// The conversation (a continued final assistant message not included).
    pub messages: Vec<Message>,
    /// The assistant text to continue (`continue_final_message`), if any.
    pub continued: Option<String>,
    /// Whether the prompt ends with the assistant header (`add_generation_prompt`).
    pub add_generation_prompt: bool,
    /// How to sample.
    pub sampling: Sampling,
    /// Whether `max_tokens` was given.
    pub max_tokens_given: bool,
    /// The seed, if given.
    pub seed: Option<u64>,
    /// Choices to sample.
    pub n: usize,
    /// Server-sent events.
    pub stream: bool,
    /// A final usage chunk when streaming (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Return each token's log-prob.
    pub logprobs: bool,
}

/// A field of `obj`, `None` when absent or null.
fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn number(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    get(obj, key)
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| ApiError::field(key, format!("`{key}` must be a number")))
        })
        .transpose()
}

fn integer(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, ApiError> {
    get(obj, key)
        .map(|v| {
            v.as_u64().ok_or_else(|| {
                ApiError::field(key, format!("`{key}` must be a non-negative integer"))
            })
        })
        .transpose()
}

fn boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    get(obj, key)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| ApiError::field(key, format!("`{key}` must be true or false")))
        })
        .transpose()
}

/// A message's text: a string, or an array of `{"type": "text", "text": ...}` parts.
fn content(v: Option<&Value>, at: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                (Some("text"), Some(Value::String(t))) => Ok(t.as_str()),
                _ => Err(ApiError::field(
                    at,
                    "only text content parts (`{\"type\": \"text\", \"text\": ...}`) are supported",
                )),
            })
            .collect::<Result<String, _>>(),
        Some(_) => Err(ApiError::field(at, "content must be a string or an array")),
    }
}

/// The `messages` array.
fn messages(obj: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let Some(Value::Array(list)) = get(obj, "messages") else {
        return Err(ApiError::field(
            "messages",
            "`messages` is required: an array of {role, content}",
        ));
    };
    if list.is_empty() {
        return Err(ApiError::field("messages", "`messages` must not be empty"));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str);
            let at = format!("messages[{i}].role");
            let text = content(m.get("content"), &format!("messages[{i}].content"))?;
            match role {
                Some("system" | "developer") => Ok(Message::system(text)),
                Some("user") => Ok(Message::user(text)),
                Some("assistant") => Ok(Message::assistant(text)),
                Some(r) => Err(ApiError::field(
                    &at,
                    format!("role `{r}` is not supported (system, developer, user, assistant)"),
                )),
                None => Err(ApiError::field(&at, "every message needs a `role`")),
            }
        })
        .collect()
}

/// `stop`: a string or an array of at most 4 non-empty strings (OpenAI's limit).
fn stop(obj: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::field(
            "stop",
            "`stop` must be a string or up to 4 non-empty strings",
        )
    };
    let list = match get(obj, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if list.len() > 4 || list.iter().any(String::is_empty) {
        return Err(bad());
    }
    Ok(list)
}

/// Fields whose non-default values this server cannot honour: refused rather than ignored.
fn unsupported(obj: &Map<String, Value>) -> Result<(), ApiError> {
    for key in ["presence_penalty", "frequency_penalty"] {
        if number(obj, key)?.is_some_and(|x| x != 0.0) {
            return Err(ApiError::field(key, format!("`{key}` is not supported")));
        }
    }
    if integer(obj, "top_logprobs")?.is_some_and(|k| k > 0) {
        return Err(ApiError::field(
            "top_logprobs",
            "`top_logprobs` is not supported (`logprobs: true` returns each sampled token's)",
        ));
    }
    for key in ["tools", "functions", "logit_bias", "response_format"] {
        if get(obj, key).is_some() {
            return Err(ApiError::field(key, format!("`{key}` is not supported")));
        }
    }
    Ok(())
}

/// The sampling fields: temperature in [0, 2] (default 1), top_p in (0, 1] (default 1),
/// `max_tokens` (or `max_completion_tokens`) in [1, cap] (default the cap).
fn sampling(obj: &Map<String, Value>, caps: &Caps) -> Result<(Sampling, bool), ApiError> {
    let temperature = number(obj, "temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::field(
            "temperature",
            "`temperature` must be between 0 and 2",
        ));
    }
    let top_p = number(obj, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::field("top_p", "`top_p` must be in (0, 1]"));
    }
    let (key, given) = match integer(obj, "max_completion_tokens")? {
        Some(m) => ("max_completion_tokens", Some(m)),
        None => ("max_tokens", integer(obj, "max_tokens")?),
    };
    if let Some(m) = given
        && (m == 0 || m > caps.max_tokens as u64)
    {
        return Err(ApiError::field(
            key,
            format!("`{key}` must be between 1 and {}", caps.max_tokens),
        ));
    }
    let s = Sampling {
        temperature,
        top_p: if temperature == 0.0 { 1.0 } else { top_p },
        max_tokens: given.map_or(caps.max_tokens, |m| m as usize),
        stop: stop(obj)?,
    };
    Ok((s, given.is_some()))
}

/// Parse and check a request body.
///
/// # Errors
/// [`ApiError::BadRequest`] naming the field.
pub fn parse(body: &[u8], caps: &Caps) -> Result<ChatRequest, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        message: format!("the body is not valid JSON: {e}"),
        param: None,
    })?;
    let Value::Object(obj) = v else {
        return Err(ApiError::BadRequest {
            message: "the body must be a JSON object".into(),
            param: None,
        });
    };
    let model = match get(&obj, "model") {
        Some(Value::String(m)) => m.clone(),
        _ => return Err(ApiError::field("model", "`model` is required: a string")),
    };
    unsupported(&obj)?;
    let mut messages = messages(&obj)?;
    let continue_final = boolean(&obj, "continue_final_message")?.unwrap_or(false);
    let add_generation_prompt = boolean(&obj, "add_generation_prompt")?.unwrap_or(true);
    let continued = if continue_final {
        if add_generation_prompt {
            return Err(ApiError::field(
                "continue_final_message",
                "`continue_final_message` needs `add_generation_prompt: false`",
            ));
        }
        match messages.pop() {
            Some(m) if m.role == ragen_gym_policy::Role::Assistant => Some(m.content),
            _ => {
                return Err(ApiError::field(
                    "continue_final_message",
                    "`continue_final_message` needs a final assistant message",
                ));
            }
        }
    } else {
        None
    };
    let (sampling, max_tokens_given) = sampling(&obj, caps)?;
    let n = integer(&obj, "n")?.unwrap_or(1);
    if n == 0 || n > caps.max_n as u64 {
        return Err(ApiError::field(
            "n",
            format!("`n` must be between 1 and {}", caps.max_n),
        ));
    }
    let include_usage = match get(&obj, "stream_options") {
        Some(Value::Object(o)) => boolean(o, "include_usage")?.unwrap_or(false),
        Some(_) => return Err(ApiError::field("stream_options", "must be an object")),
        None => false,
    };
    Ok(ChatRequest {
        model,
        messages,
        continued,
        add_generation_prompt,
        sampling,
        max_tokens_given,
        seed: integer(&obj, "seed")?,
        n: n as usize,
        stream: boolean(&obj, "stream")?.unwrap_or(false),
        include_usage,
        logprobs: boolean(&obj, "logprobs")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        max_tokens: 512,
        max_n: 8,
    };

    fn err_param(body: &str) -> String {
        match parse(body.as_bytes(), &CAPS).unwrap_err() {
            ApiError::BadRequest { param, .. } => param.unwrap_or_default(),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_full_request_parses_with_openais_defaults() {
        let r = parse(
            br#"{"model":"m","messages":[{"role":"system","content":"s"},
                {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                "stop":"</answer>","seed":7,"n":2,"logprobs":true}"#,
            &CAPS,
        )
        .unwrap();
        assert_eq!(r.messages, vec![Message::system("s"), Message::user("ab")]);
        assert_eq!(r.sampling.temperature, 1.0);
        assert_eq!(r.sampling.max_tokens, 512);
        assert!(!r.max_tokens_given);
        assert_eq!(r.sampling.stop, vec!["</answer>".to_string()]);
        assert_eq!(
            (r.seed, r.n, r.logprobs, r.stream),
            (Some(7), 2, true, false)
        );
        let r = parse(
            br#"{"model":"m","messages":[{"role":"user","content":"q"},
                {"role":"assistant","content":"<answer>"}],"continue_final_message":true,
                "add_generation_prompt":false,"temperature":0,"top_p":0.5,"max_tokens":9}"#,
            &CAPS,
        )
        .unwrap();
        assert_eq!(r.continued.as_deref(), Some("<answer>"));
        assert_eq!(r.messages.len(), 1);
        assert_eq!((r.sampling.top_p, r.sampling.max_tokens), (1.0, 9));
    }

    #[test]
    fn every_bad_field_is_named() {
        let m = r#""model":"m","messages":[{"role":"user","content":"q"}]"#;
        assert_eq!(
            err_param(&format!(r#"{{{m},"temperature":3}}"#)),
            "temperature"
        );
        assert_eq!(
            err_param(&format!(r#"{{{m},"temperature":"hot"}}"#)),
            "temperature"
        );
        assert_eq!(err_param(&format!(r#"{{{m},"top_p":0}}"#)), "top_p");
        assert_eq!(
            err_param(&format!(r#"{{{m},"max_tokens":513}}"#)),
            "max_tokens"
        );
        assert_eq!(
            err_param(&format!(r#"{{{m},"max_tokens":-1}}"#)),
            "max_tokens"
        );
        assert_eq!(err_param(&format!(r#"{{{m},"n":9}}"#)), "n");
        assert_eq!(err_param(&format!(r#"{{{m},"seed":-3}}"#)), "seed");
        assert_eq!(err_param(&format!(r#"{{{m},"stop":[1]}}"#)), "stop");
        assert_eq!(
            err_param(&format!(r#"{{{m},"stop":["a","b","c","d","e"]}}"#)),
            "stop"
        );
        assert_eq!(
            err_param(&format!(r#"{{{m},"top_logprobs":2}}"#)),
            "top_logprobs"
        );
        assert_eq!(err_param(&format!(r#"{{{m},"tools":[]}}"#)), "tools");
        assert_eq!(err_param(&format!(r#"{{{m},"stream":1}}"#)), "stream");
        assert_eq!(
            err_param(&format!(r#"{{{m},"continue_final_message":true}}"#)),
            "continue_final_message"
        );
        assert_eq!(err_param(r#"{"messages":[]}"#), "model");
        assert_eq!(err_param(r#"{"model":"m","messages":[]}"#), "messages");
        assert_eq!(err_param(r#"{"model":"m"}"#), "messages");
        assert_eq!(
            err_param(r#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#),
            "messages[0].role"
        );
        assert_eq!(
            err_param(r#"{"model":"m","messages":[{"role":"user","content":7}]}"#),
            "messages[0].content"
        );
        assert_eq!(err_param("[1]"), "");
        assert_eq!(err_param("{not json"), "");
    }
}
