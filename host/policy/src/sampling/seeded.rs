//! Sampling with a random stream chosen per row: rows from independent requests share one
//! batched call and each still draws what it would draw alone (a server's batching).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{
    PREFILL_SCORE_BYTES, Sample, SamplingParams, cached_session, decode, empty_samples,
    padded_session, validate,
};
use crate::model::LlamaModel;
use crate::prefix_cache::PrefixCache;
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// The random stream of one row: ChaCha8 seeded with `seed`, stream `stream`. Row `i` of a
/// [`super::sample`] call with seed `s` draws from `RowSeed { seed: s, stream: i }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowSeed {
    /// The ChaCha8 seed.
    pub seed: u64,
    /// The ChaCha8 stream.
    pub stream: u64,
}

impl RowSeed {
    fn rng(self) -> ChaCha8Rng {
        let mut r = ChaCha8Rng::seed_from_u64(self.seed);
        r.set_stream(self.stream);
        r
    }
}

/// [`super::sample`] with row `i` drawing from `rows[i]` instead of stream `i` of
/// `params.seed` (which is not used), so a row samples what it samples in a call of its own
/// with that seed and stream. With `cache`, prefixes are shared and cached as in
/// [`super::sample_cached`] (the same distributions up to float rounding); without, every
/// prompt is prefilled whole as in [`super::sample`].
///
/// # Errors
/// As [`super::sample`]; [`PolicyError::InvalidArgument`] when `rows` and `prompts` differ in
/// length, or for a `cache` with a model that cannot share prefixes.
pub fn sample_seeded(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    rows: &[RowSeed],
    cache: Option<&mut PrefixCache>,
) -> Result<Vec<Sample>> {
    validate(prompts, params)?;
    if rows.len() != prompts.len() {
        return Err(PolicyError::arg(
            "rows",
            format!("{} row seeds for {} prompts", rows.len(), prompts.len()),
        ));
    }
    let b = prompts.len();
    if b == 0 || params.max_new_tokens == 0 {
        return Ok(empty_samples(b));
    }
    let rngs: Vec<ChaCha8Rng> = rows.iter().map(|r| r.rng()).collect();
    match cache {
        Some(cache) => {
            if !model.shares_prefixes() {
                return Err(PolicyError::arg(
                    "model",
                    "prefix sharing needs the fused CPU f32 model (LlamaModel::shares_prefixes)",
                ));
            }
            let (first, segs, mut step) =
                cached_session(model, prompts, params.max_new_tokens, cache)?;
            let out = decode(first, rngs, params, tokenizer, None, &mut *step);
            drop(step);
            cache.finish(&segs);
            out
        }
        None => {
            let (first, mut step) = padded_session(model, tokenizer, prompts, PREFILL_SCORE_BYTES)?;
            decode(first, rngs, params, tokenizer, None, &mut *step)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{tiny_cfg, tiny_loaded};

    fn tiny() -> (LlamaModel, Tokenizer) {
        let loaded = tiny_loaded(tiny_cfg(), 3);
        (loaded.frozen_model().unwrap(), loaded.tokenizer.clone())
    }

    #[test]
    fn a_row_samples_what_it_samples_alone_whatever_its_batch() {
        let (model, tok) = tiny();
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: 12,
            seed: 5,
            ..SamplingParams::default()
        };
        let a = vec![3u32, 9, 12, 7];
        let b = vec![4u32, 5];
        // alone: `sample` with seed 5 is stream 0 of seed 5, its second row stream 1
        let alone = super::super::sample(&model, &tok, &[a.clone(), a.clone()], &params).unwrap();
        let other = SamplingParams {
            seed: 99,
            ..params.clone()
        };
        let rows = [
            RowSeed {
                seed: 77,
                stream: 0,
            },
            RowSeed { seed: 5, stream: 1 },
            RowSeed { seed: 5, stream: 0 },
        ];
        let prompts = [b.clone(), a.clone(), a.clone()];
        let mixed = sample_seeded(&model, &tok, &prompts, &other, &rows, None).unwrap();
        assert_eq!(mixed[2].tokens, alone[0].tokens);
        assert_eq!(mixed[1].tokens, alone[1].tokens);
        let mut cache = PrefixCache::new(1 << 20);
        let cached =
            sample_seeded(&model, &tok, &prompts, &other, &rows, Some(&mut cache)).unwrap();
        assert_eq!(cached[2].tokens, alone[0].tokens);
        assert!(sample_seeded(&model, &tok, &prompts, &other, &rows[..1], None).is_err());
    }
}
