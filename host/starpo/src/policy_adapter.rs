//! The candle policy as the rollout's [`Generator`] and [`Tokenize`].

use crate::prompt::{Message, Role, TokenOrigin, TokenTrace, Tokenize, TokenizeError};
use crate::rollout::{GenerateError, Generation, GenerationParams, Generator};
use ragen_gym_policy as pol;

fn tokenize_error(what: &'static str) -> impl FnOnce(pol::PolicyError) -> TokenizeError {
    move |e| TokenizeError {
        what,
        source: Box::new(e),
    }
}

/// Tokenizer adapter: ChatML segments with control tokens inserted by id.
pub struct PolicyTokenizer<'a>(pub &'a pol::Tokenizer);

fn to_policy_message(m: &Message) -> pol::Message {
    match m.role {
        Role::System => pol::Message::system(m.content.clone()),
        Role::User => pol::Message::user(m.content.clone()),
        Role::Assistant => pol::Message::assistant(m.content.clone()),
    }
}

impl Tokenize for PolicyTokenizer<'_> {
    fn encode_message(&self, message: &Message) -> Result<Vec<u32>, TokenizeError> {
        self.0
            .encode_chat(&[to_policy_message(message)], false)
            .map_err(tokenize_error("a chat message"))
    }

    fn encode_assistant_prefix(&self, forced: &str) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = self
            .0
            .encode_chat(&[], true)
            .map_err(tokenize_error("the assistant header"))?;
        ids.extend(
            self.0
                .encode(forced)
                .map_err(tokenize_error("the forced prefix"))?,
        );
        Ok(ids)
    }

    fn encode_segment_end(&self) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = vec![self.0.im_end_id()];
        ids.extend(
            self.0
                .encode("\n")
                .map_err(tokenize_error("the segment end"))?,
        );
        Ok(ids)
    }
}

/// Samples with a (detached) model view.
pub struct PolicyGenerator<'a> {
    /// The sampling model (sees every optimiser step when it is a [`pol::Policy::sampler`] view).
    pub model: pol::LlamaModel,
    /// The tokenizer.
    pub tokenizer: PolicyTokenizer<'a>,
    /// Constrained action decoding (`docs/ragen-semantics.md` §5), when the run has it on.
    pub constraint: Option<&'a pol::Constraint>,
    /// Prefix sharing (`docs/benchmarks.md`, "`bench iteration`"), when the run has it on: one
    /// cache for one rollout (the weights do not change during it), made by [`prefix_cache`].
    pub prefix_cache: Option<pol::PrefixCache>,
}

/// The prefix cache of one rollout when `[rollout] prefix_sharing` is on.
pub fn prefix_cache(cfg: &crate::Config) -> Option<pol::PrefixCache> {
    cfg.rollout
        .prefix_sharing
        .then(|| pol::PrefixCache::new(cfg.rollout.prefix_cache_mib << 20))
}

fn origin(kind: &pol::TokenKind) -> TokenOrigin {
    match kind {
        pol::TokenKind::Free => TokenOrigin::Free,
        pol::TokenKind::Forced => TokenOrigin::Forced,
        pol::TokenKind::Choice(set) => TokenOrigin::Choice(set.clone()),
    }
}

/// The trace of a constrained sample: a final `<|im_end|>` becomes the trace's end.
fn trace(s: &pol::Sample, im_end: u32) -> TokenTrace {
    let mut ids = s.tokens.clone();
    let mut origins: Vec<TokenOrigin> = s.kinds.iter().map(origin).collect();
    let end = if ids.last() == Some(&im_end) {
        ids.pop();
        origins.pop()
    } else {
        None
    };
    TokenTrace {
        ids,
        origins,
        end,
        logprobs: s.logprobs.clone(),
    }
}

impl Generator for PolicyGenerator<'_> {
    fn tokenizer(&self) -> &dyn Tokenize {
        &self.tokenizer
    }

    fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        p: &GenerationParams,
    ) -> Result<Vec<Generation>, GenerateError> {
        let params = pol::SamplingParams {
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: 0,
            max_new_tokens: p.max_new_tokens,
            stop: if p.stop_at_answer {
                vec!["</answer>".to_string()]
            } else {
                Vec::new()
            },
            seed: p.seed,
        };
        let tok = self.tokenizer.0;
        let out = match self.prefix_cache.as_mut() {
            Some(cache) => {
                pol::sample_cached(&self.model, tok, prompts, &params, self.constraint, cache)
            }
            None => pol::sample_constrained(&self.model, tok, prompts, &params, self.constraint),
        }
        .map_err(|e| GenerateError {
            prompts: prompts.len(),
            source: Box::new(e),
        })?;
        Ok(out
            .into_iter()
            .map(|s| Generation {
                trace: self.constraint.map(|_| trace(&s, tok.im_end_id())),
                text: s.text,
            })
            .collect())
    }
}
