//! An API model as the rollout's policy: `eval --model openai:NAME --base-url URL`.
//!
//! The rollout is written for token models: it encodes each prompt with the generator's
//! [`Tokenize`] and hands the ids to [`Generator::generate`]. A chat API takes messages, so the
//! API generator's "tokens" are [`ChatCode`], a lossless code of the conversation (frame ids
//! around each message, one id per character), decoded back into messages before the request.
//! The prompt layout, the parser, the action mapping and the validation protocol are therefore
//! exactly those of a candle model. As in RAGEN's API path
//! (`ragen/llm_agent/agent_proxy.py::ApiCallingWrapperWg`, `ctx_manager.py::get_env_inputs`),
//! the forced assistant prefix (`<think>` or `<answer>`) is not sent (chat APIs cannot continue
//! an assistant message) and the rollout prepends it to the returned text; with
//! `--continue-final-message` it is sent as a final assistant message that the server continues
//! (vLLM's extension, which `ragen-gym serve` understands), so the model sees the in-process
//! prompt token for token.

use super::openai::{ChatClient, ChatRequest, Completion, RetryPolicy, WireMessage};
use ragen_gym_core::splitmix64;
use ragen_gym_starpo::prompt::{Message, Role};
use ragen_gym_starpo::{
    GenerateError, Generation, GenerationParams, Generator, Tokenize, TokenizeError,
};
use std::time::Duration;

/// A lossless code of chat messages as `u32` ids: `START role text… END` per message, and
/// `START assistant text…` (no `END`) for the generation prompt's forced prefix. Text ids are
/// the character's scalar value plus [`ChatCode::TEXT`], so env text cannot forge a frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatCode;

impl ChatCode {
    const START: u32 = 0;
    const END: u32 = 1;
    const TEXT: u32 = 8;

    fn role_id(role: Role) -> u32 {
        match role {
            Role::System => 2,
            Role::User => 3,
            Role::Assistant => 4,
        }
    }

    fn text(out: &mut Vec<u32>, s: &str) {
        out.extend(s.chars().map(|c| c as u32 + Self::TEXT));
    }

    /// The messages of a generation prompt and its trailing forced prefix.
    ///
    /// # Errors
    /// Ids that are not a [`ChatCode`] sequence.
    pub fn decode(ids: &[u32]) -> Result<(Vec<Message>, String), String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < ids.len() {
            if ids[i] != Self::START || i + 1 >= ids.len() {
                return Err(format!("expected a message frame at id {i}"));
            }
            let role = match ids[i + 1] {
                2 => Role::System,
                3 => Role::User,
                4 => Role::Assistant,
                r => return Err(format!("unknown role id {r}")),
            };
            let mut content = String::new();
            i += 2;
            while i < ids.len() && ids[i] != Self::END {
                let c = ids[i]
                    .checked_sub(Self::TEXT)
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("id {} is not text", ids[i]))?;
                content.push(c);
                i += 1;
            }
            if i >= ids.len() {
                // the open assistant frame: the forced prefix, not a message
                return Ok((out, content));
            }
            i += 1;
            out.push(Message::text(role, content));
        }
        Ok((out, String::new()))
    }
}

impl Tokenize for ChatCode {
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, TokenizeError> {
        let mut out = vec![Self::START, Self::role_id(message.role)];
        Self::text(&mut out, &message.content);
        out.push(Self::END);
        Ok(out)
    }

    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, TokenizeError> {
        let mut out = vec![Self::START, Self::role_id(Role::Assistant)];
        Self::text(&mut out, forced);
        Ok(out)
    }

    fn encode_segment_end(&self) -> Result<Vec<u32>, TokenizeError> {
        Ok(vec![Self::END])
    }
}

/// An OpenAI-compatible model as a [`Generator`].
pub struct ApiGenerator {
    client: ChatClient,
    model: String,
    continue_final_message: bool,
}

/// Settings of an API model.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// The model name the server knows (`openai:NAME`).
    pub model: String,
    /// The endpoint base, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The environment variable holding the API key (none sent when it is unset).
    pub api_key_env: String,
    /// Send the forced prefix for the server to continue (`continue_final_message`).
    pub continue_final_message: bool,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Retries per request on 429, 5xx and connection failures.
    pub max_retries: u32,
    /// Longest wait for an attempt's response headers.
    pub request_timeout: Duration,
    /// Bounds on each response and on a request with its retries.
    pub limits: ragen_gym_net::Limits,
}

impl ApiGenerator {
    /// Connect-free construction (the first request reaches the server).
    ///
    /// # Errors
    /// The HTTP client could not be set up.
    pub fn new(s: &ApiSettings) -> anyhow::Result<Self> {
        let key = std::env::var(&s.api_key_env).ok().filter(|k| !k.is_empty());
        let client = ChatClient::new(
            &s.base_url,
            key,
            s.concurrency,
            s.request_timeout,
            RetryPolicy {
                max_retries: s.max_retries,
                ..RetryPolicy::default()
            },
            s.limits,
        )?;
        Ok(Self {
            client,
            model: s.model.clone(),
            continue_final_message: s.continue_final_message,
        })
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        self.client.url()
    }
}

/// The returned text, with the `</answer>` stop string restored when the server stopped on it:
/// OpenAI-style stop strings are cut from the text, while the candle sampler keeps them.
/// `sent` is the forced prefix the server continued (empty when none was sent): the answer may
/// have opened there.
fn restore_stop(c: Completion, stop_at_answer: bool, sent: &str) -> String {
    let whole = format!("{sent}{}", c.text);
    let open_answer = whole
        .rfind("<answer>")
        .is_some_and(|i| !whole[i..].contains("</answer>"));
    if stop_at_answer && open_answer && c.finish_reason.as_deref() == Some("stop") {
        format!("{}</answer>", c.text)
    } else {
        c.text
    }
}

impl Generator for ApiGenerator {
    fn tokenizer(&self) -> &dyn Tokenize {
        &ChatCode
    }

    fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        p: &GenerationParams,
    ) -> Result<Vec<Generation>, GenerateError> {
        let fail = |source: Box<dyn std::error::Error + Send + Sync>| GenerateError {
            prompts: prompts.len(),
            source,
        };
        let mut sent = Vec::with_capacity(prompts.len());
        let requests = prompts
            .iter()
            .enumerate()
            .map(|(i, ids)| {
                let (mut messages, forced) = ChatCode::decode(ids)?;
                let cont = self.continue_final_message;
                if cont {
                    messages.push(Message::text(Role::Assistant, forced.clone()));
                }
                sent.push(if cont { forced } else { String::new() });
                let messages = messages
                    .into_iter()
                    .map(|m| WireMessage {
                        role: match m.role {
                            Role::System => "system",
                            Role::User => "user",
                            Role::Assistant => "assistant",
                        },
                        content: m.content,
                    })
                    .collect();
                // One seed per request, derived from the call's seed and the prompt's index;
                // 31 bits, which every server accepts.
                let mut state = p.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                Ok(ChatRequest {
                    model: self.model.clone(),
                    messages,
                    temperature: p.temperature,
                    top_p: p.top_p,
                    max_tokens: p.max_new_tokens,
                    seed: splitmix64(&mut state) >> 33,
                    stop: if p.stop_at_answer {
                        vec!["</answer>".to_string()]
                    } else {
                        Vec::new()
                    },
                    continue_final_message: cont,
                    add_generation_prompt: cont.then_some(false),
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| fail(e.into()))?;
        let out = self
            .client
            .complete_all(requests)
            .map_err(|e| fail(Box::new(e)))?;
        Ok(out
            .into_iter()
            .zip(&sent)
            .map(|(c, sent)| Generation::text(restore_stop(c, p.stop_at_answer, sent)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_code_round_trips_and_drops_the_forced_prefix() {
        let msgs = vec![
            Message::text(Role::System, "You're a helpful assistant."),
            Message::text(Role::User, "Turn 1:\n#_P# <|im_end|> ünï"),
            Message::text(Role::Assistant, "<answer>Up</answer>"),
        ];
        let ids = ChatCode.encode_prompt(&msgs, "<think>").unwrap();
        assert_eq!(
            ChatCode::decode(&ids).unwrap(),
            (msgs, "<think>".to_string())
        );
        assert!(ChatCode::decode(&[7]).is_err());
    }

    #[test]
    fn the_answer_stop_string_is_restored_only_when_it_stopped_the_text() {
        let c = |t: &str, f: &str| Completion {
            text: t.into(),
            finish_reason: Some(f.into()),
        };
        assert_eq!(
            restore_stop(c("x</think><answer>Up", "stop"), true, ""),
            "x</think><answer>Up</answer>"
        );
        assert_eq!(
            restore_stop(c("x</think><answer>Up", "length"), true, ""),
            "x</think><answer>Up"
        );
        assert_eq!(restore_stop(c("no answer", "stop"), true, ""), "no answer");
        assert_eq!(
            restore_stop(c("<answer>Up", "stop"), false, ""),
            "<answer>Up"
        );
        // the answer opened in the continued prefix
        assert_eq!(
            restore_stop(c(" Up", "stop"), true, "<answer>"),
            " Up</answer>"
        );
        assert_eq!(restore_stop(c(" Up", "stop"), true, "<think>"), " Up");
    }
}
