//! Chat messages -> token ids. Control tokens (`<|im_start|>`, `<|im_end|>`) are inserted by id;
//! message bodies are encoded literally, so env text can never forge a control token.

use super::context::{Message, chatml_segment};

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
    /// Ids of one ChatML segment `<|im_start|>{role}\n{content}<|im_end|>\n`.
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, TokenizeError>;
    /// Ids of `<|im_start|>assistant\n{forced}` (the generation prompt's tail).
    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, TokenizeError>;
    /// Ids of a whole generation prompt.
    fn encode_prompt(&self, messages: &[Message], forced: &str) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = Vec::new();
        for m in messages {
            ids.extend(self.encode_message(m)?);
        }
        ids.extend(self.encode_assistant_prefix(forced)?);
        Ok(ids)
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::Role;

    #[test]
    fn control_tokens_are_ids_and_decode_back() {
        let m = Message {
            role: Role::User,
            content: "hi".into(),
        };
        let ids = CharTokenizer.encode_prompt(&[m], "<think>").unwrap();
        assert_eq!(ids[0], CharTokenizer::IM_START);
        assert_eq!(
            CharTokenizer::decode(&ids),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>"
        );
    }
}
