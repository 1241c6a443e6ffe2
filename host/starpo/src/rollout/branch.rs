//! Tree-shaped rollouts (`rollout.branch`, issue #34 item 3; `configs/default.toml`): after the
//! first `k` turns of a finished rollout's trajectory, `count` continuations are forked from the
//! state it reached, each playing its own episode to the end. The env is rebuilt exactly by
//! replay ([`ragen_gym_core::fork_in_place`]: reset with the recorded seed, then the recorded
//! actions, checked step by step), and the conversation is a copy of the parent's first `k`
//! turns with their sampled tokens, so every prompt of a branch starts with the parent's tokens.
//!
//! Branches share the parent's env group and seed: with GiGPO (`crate::gigpo`, arXiv 2505.10978
//! §4.2, anchor states) the parent's turn `k + 1` and its branches' first own turns answer the
//! same observation and form one step group, whose returns differ only by what followed. The
//! branches reuse the pool's env instances once the roots are done, in waves of the pool's size,
//! each wave with its own sampler seed ([`crate::seeds::branch_sampler_seed`]).

use super::{
    EnvPool, Episode, GenerationParams, Generator, RolloutError, RolloutParams, RolloutProgress,
    play, run_parallel,
};
use crate::config::BranchConfig;
use crate::seeds::branch_sampler_seed;
use ragen_gym_core::Trajectory;
use std::collections::BTreeSet;

/// Where a branch leaves its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchPoint {
    /// The parent's index among the roots.
    pub root: usize,
    /// Turns copied from the parent (played before the fork).
    pub after: usize,
}

/// The branch points of `roots` under `cfg`: for every root whose group is not in `skip`, and
/// every distinct `k` of `cfg.after_turns` (ascending) such that the root played more than `k`
/// turns (it was still running after `k`), `cfg.count` points. In root order.
pub fn branch_points(
    roots: &[Trajectory],
    skip: &BTreeSet<usize>,
    cfg: &BranchConfig,
) -> Vec<BranchPoint> {
    let mut ks = cfg.after_turns.clone();
    ks.sort_unstable();
    ks.dedup();
    let mut out = Vec::new();
    for (root, t) in roots.iter().enumerate() {
        if skip.contains(&t.group) {
            continue;
        }
        for &after in ks.iter().filter(|&&k| k > 0 && t.turns.len() > k) {
            out.extend(std::iter::repeat_n(BranchPoint { root, after }, cfg.count));
        }
    }
    out
}

/// Play the branches at `points` of `roots` (a rollout's trajectories, their envs free) on the
/// pool's envs; returns their trajectories in the order of `points`. `p` is the roots' rollout
/// settings; wave `w` samples with [`branch_sampler_seed`]`(p.sampling.seed, w)`.
pub fn branch(
    pool: &mut EnvPool,
    roots: &[Trajectory],
    points: &[BranchPoint],
    generator: &mut dyn Generator,
    p: &RolloutParams,
    on_progress: &mut dyn FnMut(RolloutProgress),
) -> Result<Vec<Trajectory>, RolloutError> {
    let (spec, envs) = pool.parts_mut();
    let mut out = Vec::with_capacity(points.len());
    for (wave, chunk) in points.chunks(envs.len().max(1)).enumerate() {
        let q = RolloutParams {
            sampling: GenerationParams {
                seed: branch_sampler_seed(p.sampling.seed, wave),
                ..p.sampling
            },
            ..p.clone()
        };
        let mut forking: Vec<_> = envs
            .iter_mut()
            .zip(chunk)
            .map(|(env, pt)| {
                let root = &roots[pt.root];
                (env, Episode::branch(root, pt.after, &q), root)
            })
            .collect();
        run_parallel(&mut forking, |(env, ep, root)| {
            ep.fork(env.as_mut(), root, &q)
        });
        let mut eps: Vec<_> = forking.into_iter().map(|(env, ep, _)| (env, ep)).collect();
        play(&mut eps, spec, generator, &q, on_progress)?;
        out.extend(
            eps.into_iter()
                .map(|(_, ep)| ep.into_trajectory(&spec.id, &q.tag)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
