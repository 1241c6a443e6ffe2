//! GiGPO's step-level advantage (Feng et al., "Group-in-Group Policy Optimization for LLM Agent
//! Training", arXiv 2505.10978, the method section: Eqs. 3 and 5-8, numbered as verl-agent's
//! comments cite them; verl-agent `gigpo/core_gigpo.py`).
//!
//! The episode level is GRPO's advantage ([`crate::advantages::grpo_outcome`] over the scores
//! that `agent_proxy.reward_normalization` normalised within env groups, the paper's Eq. 3). The
//! step level, computed here, needs no extra rollout: within one env group (same seed), the
//! turns whose observation text is identical are one *step group* (the paper's anchor states,
//! Eq. 6; verl-agent `build_step_group` without similarity matching). A turn's discounted return
//! `G_t = r_t + gamma * G_{t+1}` over its trajectory's turn rewards (Eq. 5; verl-agent
//! `compute_step_discounted_returns`) is compared with the others of its step group (Eq. 7;
//! verl-agent `step_norm_reward`): `G - mean` (`mean_norm`) or `(G - mean) / (std + 1e-6)`
//! (`mean_std_norm`, unbiased std, std 1 in a group of one). A turn alone in its step group
//! therefore gets 0. Every trained token of turn `t` gets `A_episode + w * A_step(t)` (Eq. 8;
//! verl-agent `compute_gigpo_outcome_advantage`).
//!
//! A step here is a turn (one response, perhaps several actions), as in verl-agent where a step
//! is one model call.

use crate::batch::TrainSample;
use crate::config::{GigpoConfig, GigpoMode};
use crate::metrics::{Metrics, add_stats};
use crate::stats::{mean, std_unbiased};
use std::collections::HashMap;

/// verl-agent's `epsilon` in `step_norm_reward`.
pub const EPS: f64 = 1e-6;

/// The discounted return of every turn of one trajectory: `G_t = r_t + gamma * G_{t+1}`, with
/// `G` 0 after the last turn.
pub fn discounted_returns(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut g = vec![0.0; rewards.len()];
    let mut running = 0.0;
    for t in (0..rewards.len()).rev() {
        running = rewards[t] + gamma * running;
        g[t] = running;
    }
    g
}

/// The step group of every turn of every trajectory: `anchors[i]` is trajectory `i`'s env group
/// and its turns' anchor observations. Turns of one env group with the same anchor share an id;
/// ids count from 0 in order of first appearance, so they do not depend on hashing.
pub fn step_groups(anchors: &[(usize, Vec<&str>)]) -> Vec<Vec<usize>> {
    let mut ids: HashMap<(usize, &str), usize> = HashMap::new();
    anchors
        .iter()
        .map(|(group, turns)| {
            turns
                .iter()
                .map(|a| {
                    let next = ids.len();
                    *ids.entry((*group, a)).or_insert(next)
                })
                .collect()
        })
        .collect()
}

/// The step advantage of every turn: its return `returns[i][t]` normalised within its step group
/// `groups[i][t]` as `mode` says.
pub fn step_advantages(
    returns: &[Vec<f64>],
    groups: &[Vec<usize>],
    mode: GigpoMode,
) -> Vec<Vec<f64>> {
    let mut members: HashMap<usize, Vec<f64>> = HashMap::new();
    for (r, g) in returns.iter().zip(groups) {
        for (x, id) in r.iter().zip(g) {
            members.entry(*id).or_default().push(*x);
        }
    }
    let stats: HashMap<usize, (f64, f64)> = members
        .into_iter()
        .map(|(id, xs)| {
            let sd = if xs.len() > 1 { std_unbiased(&xs) } else { 1.0 };
            (id, (mean(&xs), sd))
        })
        .collect();
    returns
        .iter()
        .zip(groups)
        .map(|(r, g)| {
            r.iter()
                .zip(g)
                .map(|(x, id)| {
                    let (m, sd) = stats[id];
                    match mode {
                        GigpoMode::MeanNorm => x - m,
                        GigpoMode::MeanStdNorm => (x - m) / (sd + EPS),
                    }
                })
                .collect()
        })
        .collect()
}

/// GiGPO's per-token advantages of `samples`: on every position of turn `t` of sample `i`,
/// `loss_mask * (episode[i] + cfg.step_advantage_w * A_step(i, t))`; positions outside every
/// turn get the episode advantage alone. Adds `gigpo/step_group_size/{mean,max,min}` (over step
/// groups) and `gigpo/step_advantages/{mean,max,min}` (over turns).
pub fn advantages(
    samples: &[TrainSample],
    episode: &[f64],
    cfg: &GigpoConfig,
    m: &mut Metrics,
) -> Vec<Vec<f32>> {
    let anchors: Vec<(usize, Vec<&str>)> = samples
        .iter()
        .map(|s| (s.group, s.turns.iter().map(|t| t.anchor.as_str()).collect()))
        .collect();
    let groups = step_groups(&anchors);
    let returns: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| {
            let r: Vec<f64> = s.turns.iter().map(|t| t.reward).collect();
            discounted_returns(&r, cfg.gamma)
        })
        .collect();
    let step = step_advantages(&returns, &groups, cfg.mode);
    let mut sizes: HashMap<usize, f64> = HashMap::new();
    groups.iter().flatten().for_each(|id| {
        *sizes.entry(*id).or_default() += 1.0;
    });
    let mut sizes: Vec<(usize, f64)> = sizes.into_iter().collect();
    sizes.sort_by_key(|(id, _)| *id);
    let sizes: Vec<f64> = sizes.into_iter().map(|(_, n)| n).collect();
    add_stats(m, "gigpo/step_group_size", &sizes);
    let flat: Vec<f64> = step.iter().flatten().copied().collect();
    add_stats(m, "gigpo/step_advantages", &flat);
    samples
        .iter()
        .zip(episode)
        .zip(&step)
        .map(|((s, ep), st)| {
            let mut per_pos = vec![*ep; s.loss_mask.len()];
            for (turn, a) in s.turns.iter().zip(st) {
                for x in &mut per_pos[turn.positions.clone()] {
                    *x = ep + cfg.step_advantage_w * a;
                }
            }
            per_pos
                .iter()
                .zip(&s.loss_mask)
                .map(|(x, w)| w * *x as f32)
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests;
