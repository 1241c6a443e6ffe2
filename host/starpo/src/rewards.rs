//! Rewards: reward-function plugins add their scores to the trajectories, and the trajectory
//! scores are normalised within groups (`docs/ragen-semantics.md` §1 step 2 and §5).

use crate::config::{Config, NormGrouping, NormMethod};
use crate::metrics::{Metrics, add_stats};
use crate::stats::{mean, std_unbiased};
use ragen_gym_core::{RewardFunction, Trajectory};
use std::collections::BTreeSet;

/// Score every trajectory with every reward function and add the score to its `extra_reward`.
/// A function that fails, or returns a non-finite total, adds nothing to that trajectory and
/// counts an error. Metrics per function (TRL's `rewards/{name}/mean` style):
/// `reward/{name}/mean` (mean added score) and `reward/{name}/errors`.
pub fn apply_reward_functions(
    functions: &mut [Box<dyn RewardFunction>],
    trajs: &mut [Trajectory],
    m: &mut Metrics,
) {
    for rf in functions {
        let mut total = 0.0;
        let mut errors = 0.0;
        for t in trajs.iter_mut() {
            match rf.score(t) {
                Ok(b) if b.total.is_finite() => {
                    t.extra_reward += b.total;
                    total += b.total;
                }
                _ => errors += 1.0,
            }
        }
        m.insert(
            format!("reward/{}/mean", rf.name()),
            total / trajs.len().max(1) as f64,
        );
        m.insert(format!("reward/{}/errors", rf.name()), errors);
    }
}

/// Each trajectory's raw score: env rewards, format penalty and reward functions (with
/// `agent_proxy.use_turn_scores`, the env rewards and reward functions only, as below).
pub fn raw_scores(cfg: &Config, trajs: &[Trajectory]) -> Vec<f64> {
    trajs
        .iter()
        .map(|t| {
            if cfg.agent_proxy.use_turn_scores {
                t.env_reward() + t.extra_reward
            } else {
                t.score()
            }
        })
        .collect()
}

/// The training scores of a rollout: each trajectory's [`raw_scores`], normalised as
/// `agent_proxy.reward_normalization` says among the trajectories whose group is not in
/// `excluded` (groups the update leaves out, [`crate::failure_policy::excluded_groups`]: their
/// scores, perhaps not finite, would skew every other's); an excluded trajectory scores 0. Adds
/// `critic/score/{mean,max,min}` of the scores of the others.
///
/// With `agent_proxy.use_turn_scores` the format penalty is left out, as in RAGEN: its turn
/// scores are the turns' env rewards, and the penalty enters only in
/// `ctx_manager.py::_normalize_score_tensor`, which `get_lm_inputs` skips with turn scores (so
/// normalisation is off too; the config requires `identity`). Reward functions, a ragen-gym
/// addition, still count.
pub fn training_scores(
    cfg: &Config,
    trajs: &[Trajectory],
    excluded: &BTreeSet<usize>,
    m: &mut Metrics,
) -> Vec<f64> {
    let raw = raw_scores(cfg, trajs);
    let usable: Vec<usize> = (0..trajs.len())
        .filter(|&i| !excluded.contains(&trajs[i].group))
        .collect();
    let norm = &cfg.agent_proxy.reward_normalization;
    let groups: Vec<usize> = match norm.grouping {
        NormGrouping::State => usable.iter().map(|&i| trajs[i].group).collect(),
        // One env tag per run: the tag's group is the whole batch.
        NormGrouping::Inductive | NormGrouping::Batch => vec![0; usable.len()],
    };
    let picked: Vec<f64> = usable.iter().map(|&i| raw[i]).collect();
    let normalised = normalize_scores(&picked, &groups, norm.method);
    add_stats(m, "critic/score", &normalised);
    let mut scores = vec![0.0; trajs.len()];
    for (i, x) in usable.into_iter().zip(normalised) {
        scores[i] = x;
    }
    scores
}

/// Score normalisation inside groups (`docs/ragen-semantics.md` §5; RAGEN
/// `ragen/llm_agent/ctx_manager.py::_normalize_score_tensor`).
/// `mean_std`: `(x - mean) / (std + 1e-6)` (unbiased); a group whose std is <= 1e-6 becomes 0.
pub fn normalize_scores(scores: &[f64], groups: &[usize], method: NormMethod) -> Vec<f64> {
    if method == NormMethod::Identity {
        return scores.to_vec();
    }
    // RAGEN normalises only when there are fewer groups than samples; with one
    // sample per group every score would otherwise collapse to 0.
    let distinct: std::collections::HashSet<usize> = groups.iter().copied().collect();
    if distinct.len() >= scores.len() {
        return scores.to_vec();
    }
    let stats = group_map(scores, groups, |g| (mean(g), std_unbiased(g)));
    scores
        .iter()
        .zip(groups)
        .map(|(x, g)| {
            let (m, sd) = stats[g];
            let z = if sd <= 1e-6 {
                0.0
            } else {
                (x - m) / (sd + 1e-6)
            };
            match method {
                NormMethod::Identity => *x,
                NormMethod::Mean => x - m,
                NormMethod::MeanStd => z,
                NormMethod::AsymClip => z.clamp(-1.0, 3.0),
            }
        })
        .collect()
}

fn group_map(
    scores: &[f64],
    groups: &[usize],
    f: impl Fn(&[f64]) -> (f64, f64),
) -> std::collections::HashMap<usize, (f64, f64)> {
    let mut by: std::collections::HashMap<usize, Vec<f64>> = Default::default();
    for (s, g) in scores.iter().zip(groups) {
        by.entry(*g).or_default().push(*s);
    }
    by.into_iter().map(|(g, v)| (g, f(&v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_core::{RewardBreakdown, RewardError};

    #[test]
    fn constant_groups_normalise_to_exact_zero() {
        // Eight scores of 10.7 have a computed std of ~1.9e-15 by the textbook formula;
        // every method must see the group as constant (advantage exactly 0, not ~2e-9).
        let mut s = vec![10.7; 8];
        s.extend([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let g: Vec<usize> = (0..16).map(|i| i / 8).collect();
        for m in [NormMethod::Mean, NormMethod::MeanStd, NormMethod::AsymClip] {
            let z = normalize_scores(&s, &g, m);
            assert_eq!(&z[..8], &[0.0; 8], "{m:?}");
            assert!(z[8] > 0.0, "{m:?}");
        }
    }

    #[test]
    fn score_normalisation() {
        let s = [1.0, 3.0, 2.0, 2.0];
        let g = [0, 0, 1, 1];
        let z = normalize_scores(&s, &g, NormMethod::MeanStd);
        let sd = 2f64.sqrt();
        assert!((z[0] + 1.0 / (sd + 1e-6)).abs() < 1e-12);
        assert_eq!(z[2], 0.0);
        assert_eq!(
            normalize_scores(&s, &g, NormMethod::Mean),
            vec![-1.0, 1.0, 0.0, 0.0]
        );
        let big = normalize_scores(&[0.0, 0.0, 0.0, 100.0], &[0; 4], NormMethod::AsymClip);
        // mean 25, std 50: (100-25)/50 = 1.5 (kept), (0-25)/50 = -0.5
        assert!((big[3] - 1.5).abs() < 1e-6 && (big[0] + 0.5).abs() < 1e-6);
    }

    #[test]
    fn normalisation_is_skipped_with_one_sample_per_group() {
        // RAGEN normalises only when #groups < batch size; otherwise scores pass through.
        let raw = [1.0, -0.2, 10.7];
        for m in [NormMethod::Mean, NormMethod::MeanStd, NormMethod::AsymClip] {
            assert_eq!(normalize_scores(&raw, &[0, 1, 2], m), raw.to_vec());
        }
        // Two groups of two: mean_std gives +-1/(1+1e-6 / s) per group.
        let z = normalize_scores(&[0.0, 1.0, 5.0, 5.0], &[0, 0, 1, 1], NormMethod::MeanStd);
        let s = (0.5f64).sqrt();
        assert!((z[0] + 0.5 / (s + 1e-6)).abs() < 1e-12 && (z[1] - 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert_eq!(&z[2..], &[0.0, 0.0]);
    }
    /// Pays the number of turns; fails on seed 13.
    struct TurnCount;

    impl RewardFunction for TurnCount {
        fn name(&self) -> &str {
            "turns"
        }
        fn score(&mut self, t: &Trajectory) -> Result<RewardBreakdown, RewardError> {
            if t.seed == 13 {
                return Err(RewardError::Refused {
                    message: "no".into(),
                });
            }
            Ok(RewardBreakdown {
                total: t.turns.len() as f64,
                components: vec![],
            })
        }
    }

    fn traj(seed: u64, group: usize, turns: usize, penalty: f64) -> Trajectory {
        let turn = ragen_gym_core::Turn {
            observation: String::new(),
            actions_left: 0,
            response: String::new(),
            think: None,
            answer: None,
            actions: vec![],
            env_reward: 0.5,
            action_is_valid: true,
            action_is_effective: true,
            format_penalty: false,
            info: vec![],
            steps: vec![],
            sampled: None,
        };
        Trajectory {
            env_id: "t/X-v0".into(),
            tag: "X".into(),
            group,
            seed,
            turns: vec![turn; turns],
            final_observation: String::new(),
            num_actions: 0,
            terminated: true,
            truncated: false,
            success: true,
            penalty,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    #[test]
    fn turn_scores_leave_the_format_penalty_out_as_ragen_does() {
        // RAGEN 5eb79b8 with use_turn_scores: each turn's env reward on its turn end, no penalty
        // (only _normalize_score_tensor adds it, and it is skipped).
        let trajs = vec![traj(1, 0, 2, -0.2), traj(2, 0, 1, 0.0)];
        let mut cfg = Config::default_config();
        let mut m = Metrics::new();
        assert_eq!(
            training_scores(&cfg, &trajs, &BTreeSet::new(), &mut m),
            vec![0.8, 0.5]
        );
        cfg.agent_proxy.use_turn_scores = true;
        assert_eq!(
            training_scores(&cfg, &trajs, &BTreeSet::new(), &mut m),
            vec![1.0, 0.5]
        );
        assert_eq!(m["critic/score/max"], 1.0);
        // ...and normalisation with turn scores is a config error naming both keys
        cfg.agent_proxy.reward_normalization.method = NormMethod::MeanStd;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("agent_proxy.use_turn_scores") && e.contains("reward_normalization.method"),
            "{e}"
        );
    }

    #[test]
    fn reward_functions_add_to_the_score_and_count_errors() {
        let mut trajs = vec![traj(1, 0, 2, -0.1), traj(13, 0, 1, 0.0), traj(2, 1, 3, 0.0)];
        let mut fns: Vec<Box<dyn RewardFunction>> = vec![Box::new(TurnCount)];
        let mut m = Metrics::new();
        apply_reward_functions(&mut fns, &mut trajs, &mut m);
        assert_eq!(m["reward/turns/mean"], (2.0 + 3.0) / 3.0);
        assert_eq!(m["reward/turns/errors"], 1.0);
        // 2 turns x 0.5 - 0.1 + 2; the failed one keeps its env score; 3 x 0.5 + 3
        let scores: Vec<f64> = trajs.iter().map(Trajectory::score).collect();
        assert!((scores[0] - 2.9).abs() < 1e-12 && scores[1] == 0.5 && scores[2] == 4.5);
        // identity normalisation (the default) keeps them and logs their stats
        let cfg = Config::default_config();
        let got = training_scores(&cfg, &trajs, &BTreeSet::new(), &mut m);
        assert_eq!(got, scores);
        assert_eq!(m["critic/score/max"], 4.5);
        // mean over the env group (state grouping): group 0 is [2.9, 0.5], group 1 alone
        let mut cfg = cfg;
        cfg.agent_proxy.reward_normalization.method = NormMethod::Mean;
        let got = training_scores(&cfg, &trajs, &BTreeSet::new(), &mut m);
        assert!((got[0] - 1.2).abs() < 1e-12 && (got[1] + 1.2).abs() < 1e-12 && got[2] == 0.0);
        // a left-out group scores 0 and counts nowhere, whatever its raw score: with batch
        // grouping group 0's [2.9, 0.5] are centred on their own mean 1.7, not on 2.63
        cfg.agent_proxy.reward_normalization.grouping = NormGrouping::Batch;
        trajs[2].extra_reward = f64::NAN;
        let mut m = Metrics::new();
        let got = training_scores(&cfg, &trajs, &BTreeSet::from([1]), &mut m);
        assert!(
            (got[0] - 1.2).abs() < 1e-12 && (got[1] + 1.2).abs() < 1e-12,
            "{got:?}"
        );
        assert_eq!(got[2], 0.0);
        assert!((m["critic/score/max"] - 1.2).abs() < 1e-12);
    }
}
