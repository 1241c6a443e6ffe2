//! The trait a reward-function plugin implements.

use crate::manifest::{Capabilities, Limits, ManifestParts, Package};
use crate::types::{RewardBreakdown, Trajectory};

/// Scores finished trajectories; the total is added to the env rewards of the trajectory.
///
/// The manifest is derived from [`ID`](Self::ID), [`LIMITS`](Self::LIMITS) and the crate's
/// Cargo `version` and `description` by [`export_reward!`](crate::export_reward).
pub trait RewardFunction: 'static {
    /// Gymnasium-style id `namespace/Name-vN` (checked when the crate compiles).
    const ID: &'static str;
    /// Limits lower than the host's (default: the host's).
    const LIMITS: Limits = Limits::NONE;

    /// Score one trajectory ([`RewardBreakdown::from_components`] sums named parts).
    ///
    /// # Errors
    /// A message recorded against the trajectory; it then contributes no reward.
    fn score(trajectory: &Trajectory) -> Result<RewardBreakdown, String>;
}

impl ManifestParts {
    /// The manifest of a reward-function plugin (what [`export_reward!`](crate::export_reward)
    /// embeds).
    pub const fn reward<T: RewardFunction + Package>() -> Self {
        Self {
            id: T::ID,
            version: T::VERSION,
            kind: "reward-function",
            description: T::DESCRIPTION,
            capabilities: Capabilities::NONE,
            limits: T::LIMITS,
        }
    }
}
