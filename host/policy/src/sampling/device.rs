//! Choosing next tokens where the logits are (on the GPU), so a decode step moves a few numbers
//! per row to the host instead of the whole `[n, V]` logits (78 MB per step at batch 128 and
//! Qwen2.5's 151,936-token vocabulary, plus a host softmax over all of it).
//!
//! It draws the same random numbers as the host path in `sampling.rs` (one uniform per row and
//! step from the row's ChaCha8 stream) and inverts the same CDF over tokens in index order, so a
//! seed gives the same tokens up to float rounding at a CDF boundary. The inverse CDF runs in two
//! levels: per-chunk masses of `exp((logit - max) / T)` go to the host, which picks a chunk, then
//! that chunk's entries go to the host, which picks the token.

use candle_core::{D, DType, Device, Tensor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::Result;
use crate::sampling::SamplingParams;

/// Tokens per chunk of the two-level inverse CDF.
const CHUNK: usize = 1024;

/// Whether next tokens are chosen on the device: the logits are not on the CPU (where the host
/// path is as fast) and there is no top-k / top-p truncation (which needs a full sort).
pub(crate) fn applies(device: &Device, p: &SamplingParams) -> bool {
    !device.is_cpu() && p.top_k == 0 && p.top_p >= 1.0
}

/// Pick one token per row of `logits` [n, V] (greedy when `temperature` is 0, else sampling at
/// that temperature, no truncation) with `rngs[i]` for row i. Returns the tokens and their
/// log-probs under the unmodified distribution (temperature 1), like the host path.
///
/// # Errors
/// Shape mismatch (`rngs.len() != n`); tensor errors.
pub(crate) fn choose_tokens(
    logits: &Tensor,
    temperature: f64,
    rngs: &mut [&mut ChaCha8Rng],
) -> Result<(Vec<u32>, Vec<f32>)> {
    let (n, v) = logits.dims2()?;
    if rngs.len() != n {
        return Err(crate::PolicyError::arg(
            "rngs",
            format!("{} generators for {n} rows", rngs.len()),
        ));
    }
    let device = logits.device();
    let logits = logits.to_dtype(DType::F32)?;
    let z = logits.broadcast_sub(&logits.max_keepdim(D::Minus1)?)?; // max 0 per row
    let lse = z.exp()?.sum_keepdim(D::Minus1)?.log()?; // [n, 1]
    let tokens: Vec<u32> = if temperature == 0.0 {
        z.argmax(D::Minus1)?.to_vec1()?
    } else {
        let q = z.affine(1.0 / temperature, 0.0)?.exp()?; // unnormalised, in (0, 1]
        let chunks = v.div_ceil(CHUNK);
        let q = q
            .pad_with_zeros(D::Minus1, 0, chunks * CHUNK - v)?
            .reshape((n * chunks, CHUNK))?;
        let masses: Vec<Vec<f32>> = q.reshape((n, chunks, CHUNK))?.sum(2)?.to_vec2()?;
        let mut picks = Vec::with_capacity(n); // (chunk, mass left to cover inside it)
        for (row, rng) in masses.iter().zip(rngs.iter_mut()) {
            let total: f64 = row.iter().map(|&m| f64::from(m)).sum();
            picks.push(invert(row, rng.random::<f64>() * total));
        }
        let rows: Vec<u32> = picks
            .iter()
            .enumerate()
            .map(|(i, &(c, _))| (i * chunks + c) as u32)
            .collect();
        let entries: Vec<Vec<f32>> = q
            .index_select(&Tensor::new(rows.as_slice(), device)?, 0)?
            .to_vec2()?;
        picks
            .iter()
            .zip(&entries)
            .map(|(&(c, left), e)| (c * CHUNK + invert(e, left).0) as u32)
            .collect()
    };
    let picked = Tensor::new(tokens.as_slice(), device)?.unsqueeze(1)?;
    let logprobs = (z.gather(&picked, 1)? - lse)?.squeeze(1)?.to_vec1()?;
    Ok((tokens, logprobs))
}

/// The first index whose cumulative mass reaches `u` (skipping empty entries), and how much of
/// `u` is left when that entry starts; the last non-empty entry when rounding leaves `u` above
/// the total.
fn invert(masses: &[f32], mut u: f64) -> (usize, f64) {
    let mut last = 0;
    for (i, &m) in masses.iter().enumerate() {
        if m <= 0.0 {
            continue;
        }
        let m = f64::from(m);
        if u <= m {
            return (i, u);
        }
        u -= m;
        last = i;
    }
    (last, f64::from(masses[last]))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::sampling::{choose, log_softmax};

    /// The device path (run here on the CPU) picks the same tokens with the same log-probs as the
    /// host path from the same generators: greedy, T = 1 and T = 0.7, a vocabulary that is not a
    /// multiple of the chunk size, peaked and flat rows.
    #[test]
    fn device_choice_equals_host_choice() {
        let (n, v) = (24, 3 * CHUNK + 517);
        let mut gen_rng = ChaCha8Rng::seed_from_u64(7);
        let logits: Vec<f32> = (0..n * v)
            .map(|i| {
                let row = i / v;
                // Rows get different scales: near-uniform (0.1) to peaked (8).
                let scale = 0.1 + row as f32 * 0.35;
                (gen_rng.random::<f32>() * 2.0 - 1.0) * scale
            })
            .collect();
        let t = Tensor::from_vec(logits.clone(), (n, v), &Device::Cpu).unwrap();
        for temperature in [0.0, 1.0, 0.7] {
            let params = SamplingParams {
                temperature,
                ..Default::default()
            };
            for step in 0..20u64 {
                let fresh = |i: usize| {
                    let mut r = ChaCha8Rng::seed_from_u64(100 + step);
                    r.set_stream(i as u64);
                    r
                };
                let mut dev_rngs: Vec<ChaCha8Rng> = (0..n).map(fresh).collect();
                let mut refs: Vec<&mut ChaCha8Rng> = dev_rngs.iter_mut().collect();
                let (tokens, lps) = choose_tokens(&t, temperature, &mut refs).unwrap();
                for i in 0..n {
                    let row = &logits[i * v..(i + 1) * v];
                    let want = choose(row, &params, &mut fresh(i));
                    assert_eq!(tokens[i], want, "T={temperature} step {step} row {i}");
                    let want_lp = log_softmax(row)[want as usize];
                    assert!(
                        (lps[i] - want_lp).abs() < 1e-5,
                        "log-prob {} vs {want_lp}",
                        lps[i]
                    );
                }
            }
        }
    }

    #[test]
    fn inverse_cdf_skips_empty_entries_and_clamps_rounding() {
        assert_eq!(invert(&[0.0, 0.5, 0.0, 0.5], 0.0), (1, 0.0));
        assert_eq!(invert(&[0.0, 0.5, 0.0, 0.5], 0.75), (3, 0.25));
        assert_eq!(invert(&[0.25, 0.25, 0.0], 0.6).0, 1);
    }
}
