//! Every seed the trainer derives, in one place.
//!
//! Env resets follow RAGEN (`docs/ragen-semantics.md` §8). The token sampler's seeds are
//! ragen-gym's own: RAGEN leaves them to vLLM. They are pure functions of the config's
//! `seed.sampler`, the rollout index, the turn and the generation call, so a resumed run samples
//! exactly what the uninterrupted run would have. **Changing any constant here changes every
//! run's samples**; the values are arbitrary, chosen only to keep the derived seeds apart.

/// Reset seeds of a batch, group-major: env `i` of group `g` gets `(g, base + g)`, so the
/// `group_size` members of a group share their initial state.
pub fn group_seeds(base: u64, env_groups: usize, group_size: usize) -> Vec<(usize, u64)> {
    (0..env_groups)
        .flat_map(|g| std::iter::repeat_n((g, base + g as u64), group_size))
        .collect()
}

/// The offset between the reset seeds of consecutive members of a group with
/// `seed.member_offset` (`2^32`: far above every group seed a run derives, so no member's seed is
/// another group's).
pub const MEMBER_SEED_STRIDE: u64 = 1 << 32;

/// Reset seeds of a training batch: [`group_seeds`], and with `member_offset` member `m` of a group
/// adds `m × MEMBER_SEED_STRIDE` to its group's seed (RAGEN-2's per-instance offset), so members
/// draw their own random outcomes.
pub fn train_seeds(
    base: u64,
    env_groups: usize,
    group_size: usize,
    member_offset: bool,
) -> Vec<(usize, u64)> {
    let mut seeds = group_seeds(base, env_groups, group_size);
    if member_offset {
        for (i, (_, seed)) in seeds.iter_mut().enumerate() {
            let member = (i % group_size.max(1)) as u64;
            *seed = seed.wrapping_add(member.wrapping_mul(MEMBER_SEED_STRIDE));
        }
    }
    seeds
}

/// The reset-seed base of training rollout `rollout_index` (0-based; Online-k reuses one rollout
/// for k iterations): `seed.train + env_groups × rollout_index` (RAGEN `es_manager.reset`).
pub fn train_reset_base(seed_train: u64, env_groups: usize, rollout_index: u64) -> u64 {
    seed_train + env_groups as u64 * rollout_index
}

/// Stride between the sampler seeds of consecutive training rollouts (a prime, so the seeds of
/// different rollouts never coincide with the small offsets of [`generation_call_seed`]).
pub const ROLLOUT_SEED_STRIDE: u64 = 7919;

/// The sampler seed of training rollout `rollout_index`.
pub fn rollout_sampler_seed(seed_sampler: u64, rollout_index: u64) -> u64 {
    seed_sampler.wrapping_add(rollout_index.wrapping_mul(ROLLOUT_SEED_STRIDE))
}

/// Offset of the validation sampler seeds from the training ones (reads as "val", `0x7a11`), so
/// a validation never replays a training rollout's random stream.
pub const VALIDATION_SEED_OFFSET: u64 = 0x7a11_0000;

/// The sampler seed of the validation run after iteration `iteration` (0 = before training).
pub fn validation_sampler_seed(seed_sampler: u64, iteration: u32) -> u64 {
    seed_sampler
        .wrapping_add(VALIDATION_SEED_OFFSET)
        .wrapping_add(u64::from(iteration))
}

/// Offset of the sampler seeds of a training rollout's retries (`failure.policy = "retry"`) from
/// the rollout's own (reads as "retry", `0x2e72`).
pub const RETRY_SEED_OFFSET: u64 = 0x2e72_0000_0000;

/// The sampler seed of retry `attempt` (1-based) of the failed groups of a training rollout whose
/// sampler seed is `rollout_seed`.
pub fn retry_sampler_seed(rollout_seed: u64, attempt: u32) -> u64 {
    rollout_seed
        .wrapping_add(RETRY_SEED_OFFSET)
        .wrapping_add(u64::from(attempt))
}

/// Offset of the sampler seeds of a training rollout's branches (`rollout.branch`,
/// [`crate::rollout::branch`]) from the rollout's own (reads as "branch", `0xb4a4`).
pub const BRANCH_SEED_OFFSET: u64 = 0xb4a4_0000_0000;

/// The sampler seed of wave `wave` (0-based) of the branches of a training rollout whose sampler
/// seed is `rollout_seed`.
pub fn branch_sampler_seed(rollout_seed: u64, wave: usize) -> u64 {
    rollout_seed
        .wrapping_add(BRANCH_SEED_OFFSET)
        .wrapping_add(wave as u64)
}

/// Multiplier that spreads one rollout's seed over its generation calls (a prime above every
/// realistic `turn × TURN_SEED_STRIDE + call` offset).
pub const CALL_SEED_MULTIPLIER: u64 = 1_000_003;
/// Stride between the generation calls of consecutive turns (a prime above the number of calls
/// one turn makes: `ceil(active envs / generation_batch_size)`).
pub const TURN_SEED_STRIDE: u64 = 10_007;

/// The sampler seed of generation call `call` (0-based) of turn `turn` in a rollout whose sampler
/// seed is `rollout_seed`.
pub fn generation_call_seed(rollout_seed: u64, turn: usize, call: usize) -> u64 {
    rollout_seed
        .wrapping_mul(CALL_SEED_MULTIPLIER)
        .wrapping_add(turn as u64 * TURN_SEED_STRIDE + call as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_group_major() {
        // RAGEN: rollout 2 of 8 groups resets group g with 10000 + 16 + g
        let s = group_seeds(train_reset_base(10_000, 8, 2), 2, 3);
        assert_eq!(
            s,
            vec![
                (0, 10016),
                (0, 10016),
                (0, 10016),
                (1, 10017),
                (1, 10017),
                (1, 10017)
            ]
        );
    }

    #[test]
    fn member_offsets_give_each_member_its_own_seed() {
        let shared = train_seeds(10_016, 2, 3, false);
        assert_eq!(shared, group_seeds(10_016, 2, 3));
        let s = train_seeds(10_016, 2, 3, true);
        let k = 1u64 << 32;
        assert_eq!(
            s,
            vec![
                (0, 10016),
                (0, 10016 + k),
                (0, 10016 + 2 * k),
                (1, 10017),
                (1, 10017 + k),
                (1, 10017 + 2 * k)
            ]
        );
    }

    #[test]
    fn sampler_seeds_keep_their_values() {
        // These values are part of every run's reproducibility: a change here is a change of
        // every sampled token, so the test pins them.
        assert_eq!(rollout_sampler_seed(0, 3), 3 * 7919);
        assert_eq!(validation_sampler_seed(5, 10), 5 + 0x7a11_0000 + 10);
        assert_eq!(generation_call_seed(2, 1, 3), 2 * 1_000_003 + 10_007 + 3);
        // distinct (turn, call) pairs of one rollout give distinct seeds
        let mut all: Vec<u64> = (0..5)
            .flat_map(|t| (0..200).map(move |c| generation_call_seed(7, t, c)))
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 1000);
    }
}
