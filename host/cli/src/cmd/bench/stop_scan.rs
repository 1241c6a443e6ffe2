//! `ragen-gym bench stop-scan`: the cost of the sampler's stop-string check over one RAGEN turn
//! (128 rows x 400 new tokens on Qwen2.5's vocabulary size, `</answer>` as the stop string, as
//! the trainer samples with `stop_at_answer`), old rule against new, alternating in one run
//! (`docs/benchmarks.md`, "Stop strings"). The old rule decodes all of a row's tokens after each
//! new one (quadratic in the row's length); the new one is
//! [`ragen_gym_policy::StopScan`] (linear). Both must find the same stops.

use std::time::Instant;

use anyhow::{Context, ensure};
use ragen_gym_policy::{StopScan, Tokenizer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Arguments of `bench stop-scan`.
#[derive(clap::Args)]
pub struct StopScanArgs {
    /// Rows of the turn.
    #[arg(long, default_value_t = 128)]
    pub rows: usize,
    /// New tokens per row.
    #[arg(long, default_value_t = 400)]
    pub tokens: usize,
    /// Size of the synthetic vocabulary (`Tokenizer::synthetic`; Qwen2.5's by default).
    #[arg(long, default_value_t = 151_936)]
    pub vocab: usize,
    /// Rounds; each runs the old rule, then the new one.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seed of the random rows.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Run the benchmark and print one line per round and side.
pub fn run(a: StopScanArgs) -> anyhow::Result<()> {
    let tok = Tokenizer::synthetic(a.vocab).context("synthetic tokenizer")?;
    let stops = vec!["</answer>".to_string()];
    let answer = tok.encode("<answer>Left</answer>")?;
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    // Random ids, except that every eighth row ends its last 16 tokens with an answer, so some
    // rows stop early and both sides must find where.
    let rows: Vec<Vec<u32>> = (0..a.rows)
        .map(|r| {
            let mut ids: Vec<u32> = (0..a.tokens)
                .map(|_| rng.random_range(3..a.vocab as u32))
                .collect();
            if r % 8 == 0 && a.tokens >= 16 + answer.len() {
                let at = a.tokens - 16;
                ids[at..at + answer.len()].copy_from_slice(&answer);
            }
            ids
        })
        .collect();
    let old = |row: &[u32]| -> anyhow::Result<Option<usize>> {
        for i in 0..row.len() {
            let text = tok.decode(&row[..=i], true)?;
            if stops.iter().any(|s| text.contains(s.as_str())) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    };
    let new = |row: &[u32]| -> anyhow::Result<Option<usize>> {
        let mut scan = StopScan::new(&tok, &stops);
        for i in 0..row.len() {
            if scan.push(&row[..=i])? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    };
    println!(
        "stop-string check: {} rows x {} tokens, synthetic vocabulary {}, stop {:?}",
        a.rows, a.tokens, a.vocab, stops[0]
    );
    for round in 1..=a.rounds {
        let t = Instant::now();
        let o: Vec<Option<usize>> = rows.iter().map(|r| old(r)).collect::<Result<_, _>>()?;
        let old_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let n: Vec<Option<usize>> = rows.iter().map(|r| new(r)).collect::<Result<_, _>>()?;
        let new_s = t.elapsed().as_secs_f64();
        ensure!(
            o == n,
            "the two rules found different stops: {o:?} vs {n:?}"
        );
        let stopped = o.iter().filter(|s| s.is_some()).count();
        println!(
            "round {round}: decode every prefix {old_s:.3} s, incremental scan {new_s:.4} s \
             ({:.0}x), {stopped} rows stopped",
            old_s / new_s
        );
    }
    Ok(())
}
