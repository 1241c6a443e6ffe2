//! Stop strings found as a row's text arrives, in time linear in its length.
//!
//! The rule is [`SamplingParams::stop`](crate::SamplingParams)'s: a row stops once the text of
//! its tokens (special tokens skipped) contains a stop string. Decoding all of a row's tokens
//! after every new one, as the sampler first did, costs a quadratic number of token decodes:
//! 10.3 million for a RAGEN turn of 128 rows x 400 tokens (`ragen-gym bench stop-scan`,
//! `docs/benchmarks.md`). [`StopScan`] instead keeps the tokenizer's incremental decoder
//! (`tokenizers::DecodeStream`, the Hugging Face `tokenizers` crate's `decode_stream`), which
//! holds back an id until its text is whole (a multi-byte character, a space a decoder strips),
//! and searches only where a new match can lie: from `longest - 1` bytes before the new text.
//! Since each earlier token was checked, a match that was not there before must end in the new
//! text. vLLM checks stop strings the same way (`vllm/v1/engine/detokenizer.py`,
//! `check_stop_strings`: the tail of the new characters plus the stop's length).
//!
//! Where the incremental decoder holds an id back (its text ends in an unfinished character,
//! which the rule's lossy decoding shows as U+FFFD after whatever text came before it in the same
//! token), that step decodes all of the row's tokens, as the rule does. When the incremental
//! decoder cannot go on (`DecodeStreamError::InvalidPrefix`: a decoder whose text of `ids[..n]`
//! is not a prefix of that of `ids[..n + 1]`), the row falls back to decoding all its tokens at
//! each step, the quadratic rule. Either way the answer stays the rule's.

use tokenizers::{
    DecodeStream, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper,
};

use crate::Result;
use crate::tokenizer::Tokenizer;

/// The incremental decoder of a [`tokenizers::Tokenizer`].
type Stream<'t> = DecodeStream<
    't,
    ModelWrapper,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// One row's stop-string search: feed it the row's tokens, one more each call.
pub struct StopScan<'t> {
    tokenizer: &'t Tokenizer,
    stops: &'t [String],
    /// Bytes of the longest stop string.
    longest: usize,
    /// `None` once the incremental decoder failed: every call then decodes all tokens.
    stream: Option<Stream<'t>>,
    /// Text of the tokens the stream has released so far.
    text: String,
    /// Tokens fed so far (each call must add exactly one).
    fed: usize,
}

impl<'t> StopScan<'t> {
    /// A search for `stops` (none: it never stops) in text decoded by `tokenizer`, special
    /// tokens skipped.
    pub fn new(tokenizer: &'t Tokenizer, stops: &'t [String]) -> Self {
        Self {
            tokenizer,
            stops,
            longest: stops.iter().map(String::len).max().unwrap_or(0),
            stream: (!stops.is_empty()).then(|| tokenizer.inner().decode_stream(true)),
            text: String::new(),
            fed: 0,
        }
    }

    /// Whether the text of `tokens` contains a stop string, where `tokens` is the row so far:
    /// the tokens of the previous call plus one (the answer is then that of decoding all of
    /// `tokens` and searching the text).
    ///
    /// # Errors
    /// [`crate::PolicyError::InvalidArgument`] when `tokens` does not grow by exactly one token a
    /// call; [`crate::PolicyError::Tokenizer`] on an id outside the vocabulary.
    pub fn push(&mut self, tokens: &[u32]) -> Result<bool> {
        if tokens.len() != self.fed + 1 {
            return Err(crate::PolicyError::arg(
                "tokens",
                format!(
                    "a stop scan takes one token a call: {} tokens after {}",
                    tokens.len(),
                    self.fed
                ),
            ));
        }
        self.fed += 1;
        if self.stops.is_empty() {
            return Ok(false);
        }
        let id = tokens[tokens.len() - 1];
        if let Some(stream) = self.stream.as_mut() {
            match stream.step(id) {
                // Held back: the text ends in an unfinished character (or the id added none).
                // Lossy decoding shows text before that character, which may complete a stop
                // string, so this step answers by the rule itself (rare: a character split
                // across tokens, or a skipped special token).
                Ok(None) => {}
                Ok(Some(chunk)) => {
                    let mut from = self
                        .text
                        .len()
                        .saturating_sub(self.longest.saturating_sub(1));
                    while !self.text.is_char_boundary(from) {
                        from -= 1;
                    }
                    self.text.push_str(&chunk);
                    let tail = &self.text[from..];
                    let hit = self.stops.iter().any(|s| tail.contains(s.as_str()));
                    // Keep only what a later match can still start in.
                    if self.text.len() > 4 * self.longest + 256 {
                        let mut cut = self.text.len() - self.longest;
                        while !self.text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        self.text.drain(..cut);
                    }
                    return Ok(hit);
                }
                Err(_) => self.stream = None,
            }
        }
        let text = self.tokenizer.decode(tokens, true)?;
        Ok(self.stops.iter().any(|s| text.contains(s.as_str())))
    }
}
