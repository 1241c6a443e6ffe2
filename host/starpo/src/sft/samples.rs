//! Demonstrations -> training samples in the exact form `train` builds them: the same prompt,
//! chat template and turn layout ([`crate::batch::build_sample`]), and, under constrained action
//! decoding, the tokens a constrained sampler would have produced for each answer with their
//! origins ([`expert_trace`]), so that only the policy's decisions are trained and each is
//! normalised over the choices the constraint allowed, as the RL update scores it.

use crate::batch::{TrainSample, build_sample};
use crate::policy_adapter::PolicyTokenizer;
use crate::prompt::{PromptConfig, TokenOrigin, TokenTrace, TokenizeError, forced_prefix};
use ragen_gym_core::Trajectory;
use ragen_gym_policy as pol;

/// The trace of an answer under `constraint`: `response` (a stored, cleaned response, forced
/// prefix included) without its forced prefix, tokenised, then the end-of-turn token, each with
/// the origin the constraint gives it ([`pol::Constraint::replay`]) and log-prob 0.
///
/// # Errors
/// The tokenizer's error, or the constraint's naming the first token the grammar forbids (an
/// answer that is not `Name ( sep Name )* </answer>`).
pub fn expert_trace(
    tokenizer: &pol::Tokenizer,
    constraint: &pol::Constraint,
    response: &str,
    enable_think: bool,
) -> pol::Result<TokenTrace> {
    let body = response
        .strip_prefix(forced_prefix(enable_think))
        .unwrap_or(response);
    let mut ids = tokenizer.encode(body)?;
    ids.push(tokenizer.im_end_id());
    let kinds = constraint.replay(&ids)?;
    let mut origins: Vec<TokenOrigin> = kinds
        .iter()
        .map(|k| match k {
            pol::TokenKind::Free => TokenOrigin::Free,
            pol::TokenKind::Forced => TokenOrigin::Forced,
            pol::TokenKind::Choice(set) => TokenOrigin::Choice(set.clone()),
        })
        .collect();
    let end = origins.pop();
    ids.pop();
    let logprobs = vec![0.0; ids.len() + 1];
    Ok(TokenTrace {
        ids,
        origins,
        end,
        logprobs,
    })
}

/// Why a demonstration could not become a sample.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// A prompt or answer could not be tokenised.
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
    /// An answer does not fit the action constraint.
    #[error("demonstration {index} (seed {seed}), turn {turn}: the answer {response:?}")]
    Answer {
        /// Index of the demonstration.
        index: usize,
        /// Its seed.
        seed: u64,
        /// The turn.
        turn: usize,
        /// The answer.
        response: String,
        /// The constraint's error.
        #[source]
        source: Box<pol::PolicyError>,
    },
}

/// One sample per demonstration with at least one trained token, in order. With `constraint`,
/// every turn gets its [`expert_trace`] first (replacing any trace it had).
///
/// # Errors
/// [`SampleError`] naming the demonstration and turn.
pub fn demonstration_samples(
    tokenizer: &pol::Tokenizer,
    constraint: Option<&pol::Constraint>,
    prompt: &PromptConfig,
    demos: &[Trajectory],
) -> Result<Vec<TrainSample>, SampleError> {
    let tok = PolicyTokenizer(tokenizer);
    let mut samples = Vec::new();
    for (index, demo) in demos.iter().enumerate() {
        let mut t = demo.clone();
        if let Some(c) = constraint {
            for (turn, x) in t.turns.iter_mut().enumerate() {
                let trace = expert_trace(tokenizer, c, &x.response, prompt.enable_think).map_err(
                    |source| SampleError::Answer {
                        index,
                        seed: demo.seed,
                        turn,
                        response: x.response.clone(),
                        source: Box::new(source),
                    },
                )?;
                x.sampled = Some(trace);
            }
        }
        if let Some(s) = build_sample(&tok, prompt, &t, index, t.score(), false)?
            && s.response_tokens() > 0
        {
            samples.push(s);
        }
    }
    Ok(samples)
}
