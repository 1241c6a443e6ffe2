//! The tokenizer (Hugging Face `tokenizers`) and ChatML chat rendering.
//!
//! Text from an environment or a user is always encoded literally: control tokens such as
//! `<|im_end|>` are only ever inserted by the chat renderer itself, never produced from text.

use std::collections::HashMap;
use std::path::Path;
use std::sync::LazyLock;

use candle_core::quantized::gguf_file;
use serde::{Deserialize, Serialize};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::{PolicyError, Result};

/// The speaker of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions framing the conversation.
    System,
    /// The user or the environment (observations are user turns).
    User,
    /// The policy.
    Assistant,
}

impl Role {
    /// The role name written after `<|im_start|>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said; encoded literally (never as control tokens).
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Start-of-turn marker of ChatML.
pub const IM_START: &str = "<|im_start|>";
/// End-of-turn marker of ChatML.
pub const IM_END: &str = "<|im_end|>";

/// A byte-level BPE tokenizer with ChatML rendering.
#[derive(Clone)]
pub struct Tokenizer {
    /// Matches added special tokens in its input (only for text we write ourselves).
    trusted: tokenizers::Tokenizer,
    /// Never produces special tokens from text.
    literal: tokenizers::Tokenizer,
    im_start: u32,
    im_end: u32,
    stop_ids: Vec<u32>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("im_start", &self.im_start)
            .field("im_end", &self.im_end)
            .finish()
    }
}

impl Tokenizer {
    /// Wrap a Hugging Face tokenizer; it must know `<|im_start|>` and `<|im_end|>`.
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] when a ChatML marker is missing.
    pub fn from_hf(
        tokenizer: tokenizers::Tokenizer,
        chat_template: Option<String>,
    ) -> Result<Self> {
        let id = |t: &str| {
            tokenizer.token_to_id(t).ok_or_else(|| {
                PolicyError::tokenizer(format!(
                    "the vocabulary has no {t} token (ChatML is required)"
                ))
            })
        };
        let im_start = id(IM_START)?;
        let im_end = id(IM_END)?;
        let mut stop_ids = vec![im_end];
        if let Some(eot) = tokenizer.token_to_id("<|endoftext|>") {
            stop_ids.push(eot);
        }
        let mut literal = tokenizer.clone();
        literal.set_encode_special_tokens(true);
        Ok(Self {
            trusted: tokenizer,
            literal,
            im_start,
            im_end,
            stop_ids,
            chat_template,
        })
    }

    /// A self-contained byte-level BPE tokenizer of any vocabulary size, for models with random
    /// weights (tests, `ragen-gym bench gpu-check`): ids 0-2 are `<|endoftext|>`,
    /// `<|im_start|>`, `<|im_end|>`, ids 3-258 the 256 bytes, and further ids letter n-grams
    /// (two, three, then four of `A-Za-z`, optionally after a space) with the merges that build
    /// them. So every id decodes to valid text, English prose encodes to two or three characters
    /// per token, and the text of sampled tokens encodes back to a similar number of tokens (a
    /// multi-turn context grows like it would with a real tokenizer). With 259 ids it is one
    /// token per byte.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when `vocab_size` is below 259 or above 7.6 million.
    pub fn synthetic(vocab_size: usize) -> Result<Self> {
        let specials = ["<|endoftext|>", IM_START, IM_END];
        let mut bytes: Vec<char> = ByteLevel::alphabet().into_iter().collect();
        bytes.sort_unstable();
        let letters: Vec<char> = ('A'..='Z').chain('a'..='z').collect();
        let base = specials.len() + bytes.len();
        let most = base
            + (1..=3)
                .map(|k| (letters.len() + 1) * letters.len().pow(k))
                .sum::<usize>();
        if vocab_size < base || vocab_size > most {
            return Err(PolicyError::arg(
                "vocab_size",
                format!("a synthetic vocabulary has {base} to {most} tokens, not {vocab_size}"),
            ));
        }
        let mut vocab: tokenizers::models::bpe::Vocab = Default::default();
        for (i, s) in specials.iter().enumerate() {
            vocab.insert(s.to_string(), i as u32);
        }
        for (i, c) in bytes.iter().enumerate() {
            vocab.insert(c.to_string(), (specials.len() + i) as u32);
        }
        // n-grams in order of length; each is merged from its (n-1)-letter prefix and last letter.
        // A gram may start with `Ġ` (byte-level's space), so a word takes its leading space along.
        let mut merges = Vec::new();
        let mut grams: Vec<String> = std::iter::once('Ġ')
            .chain(letters.iter().copied())
            .map(String::from)
            .collect();
        'fill: while vocab.len() < vocab_size {
            let mut longer = Vec::with_capacity(grams.len() * letters.len());
            for g in &grams {
                for &c in &letters {
                    if vocab.len() == vocab_size {
                        break 'fill;
                    }
                    let token = format!("{g}{c}");
                    vocab.insert(token.clone(), vocab.len() as u32);
                    merges.push((g.clone(), c.to_string()));
                    longer.push(token);
                }
            }
            grams = longer;
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(PolicyError::tokenizer)?;
        let mut tok = tokenizers::Tokenizer::new(bpe);
        tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
        tok.add_special_tokens(specials.map(|s| AddedToken::from(s, true)))
            .map_err(PolicyError::tokenizer)?;
        Self::from_hf(tok, None)
    }

    /// Load `tokenizer.json` (and the chat template from a sibling `tokenizer_config.json`).
    ///
    /// # Errors
    /// [`PolicyError::InvalidModel`] naming the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let tok = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| PolicyError::invalid_model(path, format!("tokenizer.json: {e}")))?;
        let template = path
            .parent()
            .map(|d| d.join("tokenizer_config.json"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| {
                v.get("chat_template")
                    .and_then(|t| t.as_str())
                    .map(str::to_string)
            });
        Self::from_hf(tok, template).map_err(|e| PolicyError::invalid_model(path, e.to_string()))
    }

    /// Rebuild the tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    ///
    /// Byte-level BPE **without** a prefix space; the pre-tokenizer follows `tokenizer.ggml.pre`
    /// (`smollm`: single digits then GPT-2 byte-level; `qwen2`: the Qwen2 split regex). candle's
    /// own GGUF conversion adds a prefix space and mis-tokenizes ChatML (the ChatML test in
    /// `tests/real_model.rs`).
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] when the metadata is incomplete.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let md = &ct.metadata;
        let strings = |key: &str| -> Result<Vec<String>> {
            let v = md
                .get(key)
                .ok_or_else(|| PolicyError::tokenizer(format!("gguf metadata lacks {key}")))?;
            v.to_vec()?
                .iter()
                .map(|x| Ok(x.to_string()?.clone()))
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let model = md
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .cloned();
        if model.as_deref().is_some_and(|m| m != "gpt2") {
            return Err(PolicyError::tokenizer(format!(
                "gguf tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\")"
            )));
        }
        let types: Vec<i32> = match md.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()?
                .iter()
                .map(|x| x.to_i32())
                .collect::<candle_core::Result<_>>()?,
            None => vec![1; tokens.len()],
        };
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .filter_map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(PolicyError::tokenizer)?;
        let mut tok = tokenizers::Tokenizer::new(bpe);
        let pre = md
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.to_string().ok())
            .cloned();
        tok.with_pre_tokenizer(Some(gguf_pre_tokenizer(pre.as_deref())?));
        tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, ty)| matches!(**ty, 3 | 4))
            .map(|(t, _)| AddedToken::from(t.clone(), true))
            .collect();
        tok.add_special_tokens(specials)
            .map_err(PolicyError::tokenizer)?;
        let template = md
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned();
        Self::from_hf(tok, template)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.trusted.get_vocab_size(true)
    }

    /// Id of `<|im_start|>`.
    pub fn im_start_id(&self) -> u32 {
        self.im_start
    }

    /// Id of `<|im_end|>`.
    pub fn im_end_id(&self) -> u32 {
        self.im_end
    }

    /// Tokens that end a generated turn: `<|im_end|>` and, when present, `<|endoftext|>`.
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The id of a token string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.trusted.token_to_id(token)
    }

    /// The bytes token `id` stands for in text, or `None` for a special token, an id outside
    /// the vocabulary or a token without a byte form. In a byte-level BPE vocabulary these are
    /// the token's exact bytes, also when it holds part of a UTF-8 character; otherwise the
    /// token's decoded text when that is whole characters.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let added = self
            .trusted
            .get_added_vocabulary()
            .get_added_tokens_decoder();
        if added.get(&id).is_some_and(|t| t.special) {
            return None;
        }
        let bytes = if matches!(
            self.trusted.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        ) {
            let table = byte_level_char_bytes();
            self.trusted
                .id_to_token(id)?
                .chars()
                .map(|c| table.get(&c).copied())
                .collect::<Option<Vec<u8>>>()?
        } else {
            self.decode(&[id], false)
                .ok()
                .filter(|s| !s.contains('\u{FFFD}'))?
                .into_bytes()
        };
        (!bytes.is_empty()).then_some(bytes)
    }

    /// The underlying Hugging Face tokenizer (special tokens enabled).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.trusted
    }

    /// The Jinja chat template shipped with the model, if any (not executed; informational).
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The system prompt the model's chat template inserts when a conversation has none
    /// (e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
    /// extracted from the template's literal `<|im_start|>system\n...<|im_end|>` string.
    pub fn default_system_prompt(&self) -> Option<String> {
        let t = self.chat_template.as_deref()?;
        for marker in ["<|im_start|>system\n", "<|im_start|>system\\n"] {
            for (at, _) in t.match_indices(marker) {
                let rest = &t[at + marker.len()..];
                if let Some(end) = rest.find(IM_END) {
                    let body = &rest[..end];
                    if !body.is_empty() && !body.contains(['\'', '{', '}', '"']) {
                        return Some(body.replace("\\n", "\n"));
                    }
                }
            }
        }
        None
    }

    /// Encode text literally: a control-token string inside it stays ordinary text.
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] on internal tokenizer failures.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .literal
            .encode(text, false)
            .map_err(PolicyError::tokenizer)?
            .get_ids()
            .to_vec())
    }

    /// Encode text we wrote ourselves, matching special tokens such as `<|im_end|>` to their ids.
    /// Never use this for environment or user text.
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] on internal tokenizer failures.
    pub fn encode_trusted(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .trusted
            .encode(text, false)
            .map_err(PolicyError::tokenizer)?
            .get_ids()
            .to_vec())
    }

    /// Decode ids to text; `skip_special` drops control tokens.
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] on an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.trusted
            .decode(ids, skip_special)
            .map_err(PolicyError::tokenizer)
    }

    /// ChatML text of a conversation:
    /// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`
    /// when `add_generation_prompt`. For display; use [`Tokenizer::encode_chat`] for ids.
    pub fn render_chat(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        let mut s = String::new();
        for m in messages {
            s.push_str(IM_START);
            s.push_str(m.role.as_str());
            s.push('\n');
            s.push_str(&m.content);
            s.push_str(IM_END);
            s.push('\n');
        }
        if add_generation_prompt {
            s.push_str(IM_START);
            s.push_str("assistant\n");
        }
        s
    }

    /// Token ids of [`Tokenizer::render_chat`], with control tokens inserted by id and every
    /// message body encoded literally. Equals encoding the rendered text with special tokens
    /// enabled whenever no message contains a control-token string.
    ///
    /// # Errors
    /// [`PolicyError::Tokenizer`] on internal tokenizer failures.
    pub fn encode_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let newline = self.encode("\n")?;
        let mut ids = Vec::new();
        for m in messages {
            ids.push(self.im_start);
            ids.extend(self.encode(&format!("{}\n{}", m.role.as_str(), m.content))?);
            ids.push(self.im_end);
            ids.extend(&newline);
        }
        if add_generation_prompt {
            ids.push(self.im_start);
            ids.extend(self.encode("assistant\n")?);
        }
        Ok(ids)
    }

    /// Write `tokenizer.json` (and `tokenizer_config.json` with the chat template) into `dir`.
    ///
    /// # Errors
    /// [`PolicyError::Io`] naming the file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join("tokenizer.json");
        self.trusted
            .save(&path, false)
            .map_err(|e| PolicyError::io(&path, std::io::Error::other(e.to_string())))?;
        let cfg = serde_json::json!({
            "chat_template": self.chat_template,
            "bos_token": null,
            "eos_token": IM_END,
            "pad_token": IM_END,
            "add_bos_token": false,
            "tokenizer_class": "PreTrainedTokenizerFast",
        });
        let path = dir.join("tokenizer_config.json");
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&cfg).unwrap_or_default(),
        )
        .map_err(|e| PolicyError::io(&path, e))
    }
}

/// The pre-tokenizer `tokenizer.ggml.pre` names: `qwen2`'s split regex then byte-level, or
/// otherwise (`smollm`) single digits then GPT-2 byte-level.
fn gguf_pre_tokenizer(pre: Option<&str>) -> Result<PreTokenizerWrapper> {
    Ok(match pre {
        Some("qwen2") => {
            let split = Split::new(
                SplitPattern::Regex(QWEN2_SPLIT.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(PolicyError::tokenizer)?;
            Sequence::new(vec![
                split.into(),
                ByteLevel::new(false, false, false).into(),
            ])
            .into()
        }
        _ => Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into(),
    })
}

/// The Qwen2 pre-tokenizer split regex (from Qwen2's `tokenizer.json`).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Byte-level BPE's byte-to-character table, inverted (openai/gpt-2
/// `src/encoder.py::bytes_to_unicode`). The characters are those of `tokenizers`' alphabet: a
/// printable byte stands for itself (exactly the alphabet's characters below U+0100), and the
/// other bytes, in increasing order, for the alphabet's remaining characters, in increasing order.
fn byte_level_char_bytes() -> &'static HashMap<char, u8> {
    static TABLE: LazyLock<HashMap<char, u8>> = LazyLock::new(|| {
        let alphabet = ByteLevel::alphabet();
        let mut others: Vec<char> = alphabet.iter().copied().filter(|&c| c > '\u{FF}').collect();
        others.sort_unstable();
        let mut others = others.into_iter();
        (0..=255u8)
            .filter_map(|b| {
                let c = char::from(b);
                let c = if alphabet.contains(&c) {
                    Some(c)
                } else {
                    others.next()
                };
                c.map(|c| (c, b))
            })
            .collect()
    });
    &TABLE
}
