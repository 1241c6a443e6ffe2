//! The candle policy as the rollout's [`Generator`] and [`Tokenize`].

use crate::config::Config;
use crate::metrics::Metrics;
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

/// Whether a run's rollouts share prompt prefixes (`docs/ragen-semantics.md` §11, "Prefix
/// sharing"): decided once per run, by [`PrefixSharing::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixSharing {
    /// Every prompt is prefilled whole: the config turns sharing off, or the model cannot share.
    Off,
    /// Shared and cached prefixes, the cache's entries kept up to `cache_bytes`.
    On {
        /// `[rollout] prefix_cache_mib` in bytes.
        cache_bytes: usize,
    },
}

impl PrefixSharing {
    /// The one decision: on when `[rollout] prefix_sharing` asks for it and the policy can share
    /// prefixes with `model` (the fused CPU f32 model, [`pol::LlamaModel::shares_prefixes`]).
    /// When the config asks and the model cannot (a CUDA device, a bf16 compute dtype), it logs
    /// one warning and the run samples without sharing, and so without the sharing metrics.
    pub fn decide(cfg: &Config, model: &pol::LlamaModel) -> Self {
        if !cfg.rollout.prefix_sharing {
            return Self::Off;
        }
        if !model.shares_prefixes() {
            tracing::warn!(
                device = %pol::device_label(model.device()),
                dtype = ?model.compute_dtype(),
                "rollout.prefix_sharing is on, but prefix sharing runs only on the CPU in f32: \
                 sampling without it (no rollout/prefilled_token_frac or \
                 rollout/prefix_cache_peak_mib metrics)"
            );
            return Self::Off;
        }
        Self::On {
            cache_bytes: cfg.rollout.prefix_cache_mib << 20,
        }
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
    /// The prefix cache when sharing is [`PrefixSharing::On`]: one cache for one rollout (the
    /// weights do not change during it).
    prefix_cache: Option<pol::PrefixCache>,
}

impl<'a> PolicyGenerator<'a> {
    /// A generator for one rollout: `model` a detached view ([`pol::Policy::sampler`]), decoding
    /// under `constraint` when the run has one, sharing prefixes as `sharing` decided.
    pub fn new(
        model: pol::LlamaModel,
        tokenizer: &'a pol::Tokenizer,
        constraint: Option<&'a pol::Constraint>,
        sharing: PrefixSharing,
    ) -> Self {
        let prefix_cache = match sharing {
            PrefixSharing::Off => None,
            PrefixSharing::On { cache_bytes } => Some(pol::PrefixCache::new(cache_bytes)),
        };
        Self {
            model,
            tokenizer: PolicyTokenizer(tokenizer),
            constraint,
            prefix_cache,
        }
    }

    /// The metrics of prefix sharing over the calls so far, when it ran (none without it):
    /// `rollout/prefilled_token_frac`, the share of the prompt tokens that went through the model
    /// (the rest were read from shared or cached prefixes; without sharing every prompt token is
    /// prefilled), `rollout/prefix_cache_evicted_entries`, the entries dropped to stay under the
    /// cap, and `rollout/prefix_cache_peak_mib`, the most MiB of keys and values the cache held
    /// at once.
    pub fn prefix_sharing_metrics(&self) -> Metrics {
        let mut m = Metrics::new();
        if let Some(st) = self.prefix_cache.as_ref().map(pol::PrefixCache::stats) {
            let frac = st.prefilled_tokens as f64 / st.prompt_tokens.max(1) as f64;
            m.insert("rollout/prefilled_token_frac".into(), frac);
            m.insert(
                "rollout/prefix_cache_evicted_entries".into(),
                st.evicted_entries as f64,
            );
            m.insert(
                "rollout/prefix_cache_peak_mib".into(),
                st.peak_bytes as f64 / 1048576.0,
            );
        }
        m
    }
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

    fn expect_turn(&mut self, prompts: &[Vec<u32>]) {
        if let Some(cache) = self.prefix_cache.as_mut() {
            cache.expect(prompts);
        }
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
