//! Counts of a rollout's sampled tokens by origin ([`OriginCounts`]), for the metrics of
//! constrained action decoding (`docs/ragen-semantics.md` §5, "Constrained action decoding"),
//! and the re-export of the traces they count ([`TokenTrace`], defined in `ragen-gym-core`).

pub use ragen_gym_core::{TokenOrigin, TokenTrace};

/// Counts of sampled tokens by origin, for `rollout/constrained_token_frac` and
/// `rollout/forced_token_frac`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OriginCounts {
    /// All sampled tokens.
    pub total: usize,
    /// Forced ones.
    pub forced: usize,
    /// Constrained choices.
    pub choice: usize,
}

impl OriginCounts {
    /// Add the tokens of `trace`.
    pub fn add(&mut self, trace: &TokenTrace) {
        for o in trace.sampled() {
            self.total += 1;
            match o {
                TokenOrigin::Free => {}
                TokenOrigin::Forced => self.forced += 1,
                TokenOrigin::Choice(_) => self.choice += 1,
            }
        }
    }

    /// `(constrained choices, forced)` as fractions of the sampled tokens (0 when none).
    pub fn fractions(&self) -> (f64, f64) {
        let n = self.total.max(1) as f64;
        (self.choice as f64 / n, self.forced as f64 / n)
    }
}
