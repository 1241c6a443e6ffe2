//! Chat messages -> token ids. Control tokens (`<|im_start|>`, `<|im_end|>`) are inserted by id;
//! message bodies are encoded literally, so env text can never forge a control token.

use super::context::{Message, SampledBody, chatml_segment};
use super::trace::TokenOrigin;

/// Why a message could not be tokenised.
#[derive(Debug, thiserror::Error)]
#[error("tokenize {what}")]
pub struct TokenizeError {
    /// What was being encoded (`a chat message`, `the assistant prefix`).
    pub what: &'static str,
    /// The tokenizer's own error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Encodes ChatML conversations.
pub trait Tokenize {
    /// Ids of one ChatML segment `<|im_start|>{role}\n{content}<|im_end|>\n`, from the text
    /// (see [`Tokenize::encode_segment`] for sampled responses).
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, TokenizeError>;
    /// Ids of `<|im_start|>assistant\n{forced}` (the generation prompt's tail).
    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, TokenizeError>;
    /// Ids of a segment's end, `<|im_end|>\n`.
    fn encode_segment_end(&self) -> Result<Vec<u32>, TokenizeError>;
    /// Ids of one message: its text, or for a response sampled under constrained decoding the
    /// exact tokens of [`encode_sampled`].
    fn encode_segment(&self, message: &Message) -> Result<Vec<u32>, TokenizeError> {
        match &message.sampled {
            Some(body) => Ok(encode_sampled(self, body)?.ids),
            None => self.encode_message(message),
        }
    }
    /// Ids of a whole generation prompt.
    fn encode_prompt(&self, messages: &[Message], forced: &str) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = Vec::new();
        for m in messages {
            ids.extend(self.encode_segment(m)?);
        }
        ids.extend(self.encode_assistant_prefix(forced)?);
        Ok(ids)
    }
}

/// The tokens of an assistant segment sampled under constrained decoding, exactly as the model
/// saw and produced them: the generation prompt's tail `<|im_start|>assistant\n{forced}`, the
/// sampled ids, then `<|im_end|>\n`; with the origin and the sampler's log-prob of each token.
/// Everything the host wrote is [`TokenOrigin::Forced`] with log-prob 0; the `<|im_end|>` keeps
/// its sampled origin when the model ended the turn itself.
pub fn encode_sampled<T: Tokenize + ?Sized>(
    tok: &T,
    body: &SampledBody,
) -> Result<SampledSegment, TokenizeError> {
    let trace = &body.trace;
    let mut ids = tok.encode_assistant_prefix(body.forced)?;
    let mut tokens = vec![(TokenOrigin::Forced, 0.0); ids.len()];
    ids.extend(&trace.ids);
    let sampled = trace.sampled().cloned();
    let lp = trace.logprobs.iter().copied().chain(std::iter::repeat(0.0));
    let mut sampled: Vec<(TokenOrigin, f32)> = sampled.zip(lp).collect();
    let end_token = trace
        .end
        .as_ref()
        .map(|_| sampled.pop().expect("the end was sampled"));
    tokens.extend(sampled);
    let end = tok.encode_segment_end()?;
    tokens.extend((0..end.len()).map(|i| match (&end_token, i) {
        (Some(t), 0) => t.clone(),
        _ => (TokenOrigin::Forced, 0.0),
    }));
    ids.extend(end);
    Ok(SampledSegment { ids, tokens })
}

/// The tokens of a sampled assistant segment ([`encode_sampled`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledSegment {
    /// The token ids.
    pub ids: Vec<u32>,
    /// Per id: how it was produced and the sampler's log-prob of it (0 for host tokens).
    pub tokens: Vec<(TokenOrigin, f32)>,
}

/// A [`Tokenize`] for tests and tools: one id per `char`, control tokens as ids 1 and 2.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharTokenizer;

impl CharTokenizer {
    /// Id of `<|im_start|>`.
    pub const IM_START: u32 = 1;
    /// Id of `<|im_end|>`.
    pub const IM_END: u32 = 2;

    fn encode_text(text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("<|im_start|>") {
                out.push(Self::IM_START);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("<|im_end|>") {
                out.push(Self::IM_END);
                rest = r;
            } else {
                let c = rest.chars().next().expect("non-empty");
                out.push(c as u32);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }

    /// Ids back to text (control ids become their markers).
    pub fn decode(ids: &[u32]) -> String {
        ids.iter()
            .map(|&c| match c {
                Self::IM_START => "<|im_start|>".to_string(),
                Self::IM_END => "<|im_end|>".to_string(),
                c => char::from_u32(c).map_or_else(String::new, String::from),
            })
            .collect()
    }
}

impl Tokenize for CharTokenizer {
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, TokenizeError> {
        Ok(Self::encode_text(&chatml_segment(message)))
    }
    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, TokenizeError> {
        Ok(Self::encode_text(&format!(
            "<|im_start|>assistant\n{forced}"
        )))
    }
    fn encode_segment_end(&self) -> Result<Vec<u32>, TokenizeError> {
        Ok(Self::encode_text("<|im_end|>\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::Role;

    #[test]
    fn control_tokens_are_ids_and_decode_back() {
        let m = Message::text(Role::User, "hi");
        let ids = CharTokenizer.encode_prompt(&[m], "<think>").unwrap();
        assert_eq!(ids[0], CharTokenizer::IM_START);
        assert_eq!(
            CharTokenizer::decode(&ids),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>"
        );
    }
}
