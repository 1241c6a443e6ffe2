//! Advantage estimators and score normalisation (spec §4.4, §5.2, §5.3; verl `core_algos`).
//!
//! Per-token arrays are indexed by *response position* `j` (predicting token `j + 1` of the
//! sequence), length `L - 1` for a sequence of `L` tokens, like verl's `responses` tensors.

use crate::config::{KlType, NormMethod};
use crate::stats::{mean, std_unbiased};

/// GAE over every position of one sequence (verl `compute_gae_advantage_return`, as RAGEN v1 runs
/// it: the recursion covers all positions, and the critic's values are multiplied by the mask, so
/// they are 0 outside assistant tokens). Returns `(advantages, returns)` with
/// `returns = advantages + values`. With `gamma = lam = 1` and one reward `R` on the last
/// position this is `A_t = R - V_t`.
pub fn gae(
    rewards: &[f32],
    values: &[f32],
    mask: &[f32],
    gamma: f32,
    lam: f32,
) -> (Vec<f32>, Vec<f32>) {
    let n = rewards.len();
    assert_eq!(
        values.len(),
        n,
        "values and rewards have one entry per response position"
    );
    assert_eq!(
        mask.len(),
        n,
        "mask and rewards have one entry per response position"
    );
    let v: Vec<f32> = values.iter().zip(mask).map(|(v, m)| v * m).collect();
    let mut adv = vec![0.0f32; n];
    let mut last = 0.0f32;
    for t in (0..n).rev() {
        let next = if t + 1 < n { v[t + 1] } else { 0.0 };
        let delta = rewards[t] + gamma * next - v[t];
        last = delta + gamma * lam * last;
        adv[t] = last;
    }
    let ret = adv.iter().zip(&v).map(|(a, v)| a + v).collect();
    (adv, ret)
}

/// Whiten advantages over all masked positions of the batch (verl `masked_whiten`: subtract the
/// masked mean, divide by `sqrt(unbiased masked var + 1e-8)`). Unmasked positions are also
/// shifted and scaled; they never enter a loss.
pub fn masked_whiten(advs: &mut [Vec<f32>], masks: &[Vec<f32>]) {
    let (mut sum, mut cnt) = (0.0f64, 0.0f64);
    for (a, m) in advs.iter().zip(masks) {
        for (x, w) in a.iter().zip(m) {
            sum += (*x as f64) * (*w as f64);
            cnt += *w as f64;
        }
    }
    if cnt == 0.0 {
        return;
    }
    let mu = sum / cnt;
    let mut var = 0.0f64;
    for (a, m) in advs.iter().zip(masks) {
        for (x, w) in a.iter().zip(m) {
            var += (*x as f64 - mu).powi(2) * (*w as f64);
        }
    }
    var /= cnt;
    if cnt > 1.0 {
        var *= cnt / (cnt - 1.0);
    }
    let inv = 1.0 / (var + 1e-8).sqrt();
    for a in advs.iter_mut() {
        for x in a.iter_mut() {
            *x = ((*x as f64 - mu) * inv) as f32;
        }
    }
}

/// GRPO outcome advantage per trajectory, as RAGEN 5eb79b8 runs verl's
/// `core_algos.py::compute_grpo_outcome_advantage`.
///
/// verl normalises each score within the trajectories that share a uid:
/// `(R - mean_uid) / (std_uid + eps)` (or `R - mean_uid` without `norm_by_std`), with mean 0 and
/// std 1 for a uid of one. RAGEN `ragen/trainer/agent_trainer.py::fit` gives **every trajectory
/// its own uid** (`uuid4()` per row; the group normalisation is `agent_proxy.reward_normalization`,
/// done before, here [`normalize_scores`]). So the advantage is `R / (1 + eps)` (`R` without
/// `norm_by_std`): one env group scoring `[1, 0]` gives `[1 / (1 + 1e-6), 0]`, not
/// `[0.707, -0.707]`. `eps` is 1e-6 in verl. The caller broadcasts the result over the
/// trajectory's loss mask.
///
/// `_env_groups` (the trajectories' env groups) is deliberately not the uid; the parameter goes
/// when the trainer's advantage step moves out of `trainer.rs` (#8).
pub fn grpo_outcome(
    scores: &[f64],
    _env_groups: &[usize],
    norm_by_std: bool,
    eps: f64,
) -> Vec<f64> {
    // A uid of one: mean 0, std 1.
    scores
        .iter()
        .map(|s| if norm_by_std { s / (1.0 + eps) } else { *s })
        .collect()
}

/// Score normalisation inside groups (spec §4.4, RAGEN `agent_proxy.reward_normalization`).
/// `mean_std`: `(x - mean) / (std + 1e-6)` (unbiased); a group whose std is <= 1e-6 becomes 0.
pub fn normalize_scores(scores: &[f64], groups: &[usize], method: NormMethod) -> Vec<f64> {
    if method == NormMethod::Identity {
        return scores.to_vec();
    }
    // RAGEN normalises only when there are fewer groups than samples (spec §4.4); with one
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

/// Per-token KL estimate between the actor and the reference (verl `kl_penalty`):
/// k1 = `logp - ref_logp`; k3 = `exp(ref - logp) - (ref - logp) - 1`, clamped to [-10, 10].
pub fn kl_estimate(logp: f32, ref_logp: f32, kind: KlType) -> f32 {
    match kind {
        KlType::K1 => logp - ref_logp,
        KlType::K3 => {
            let kl = ref_logp - logp;
            (kl.exp() - kl - 1.0).clamp(-10.0, 10.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gae_gamma_lam_one_is_return_minus_value() {
        // 4 positions, mask on 1..=3, reward 2 on the last one.
        let r = [0.0, 0.0, 0.0, 2.0];
        let v = [9.0, 0.5, 1.0, 1.5];
        let m = [0.0, 1.0, 1.0, 1.0];
        let (a, ret) = gae(&r, &v, &m, 1.0, 1.0);
        // value at t=0 is masked to 0
        assert_eq!(a, vec![2.0, 1.5, 1.0, 0.5]);
        assert_eq!(ret, vec![2.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn gae_hand_computed_discounted() {
        // gamma 0.5, lam 0.5, rewards [1, 0, 2], values [1, 2, 1], all masked.
        // delta2 = 2 - 1 = 1; A2 = 1
        // delta1 = 0 + 0.5*1 - 2 = -1.5; A1 = -1.5 + 0.25*1 = -1.25
        // delta0 = 1 + 0.5*2 - 1 = 1; A0 = 1 + 0.25*(-1.25) = 0.6875
        let (a, ret) = gae(&[1.0, 0.0, 2.0], &[1.0, 2.0, 1.0], &[1.0; 3], 0.5, 0.5);
        assert_eq!(a, vec![0.6875, -1.25, 1.0]);
        assert_eq!(ret, vec![1.6875, 0.75, 2.0]);
    }

    #[test]
    fn whitening_uses_masked_unbiased_stats() {
        let mut a = vec![vec![1.0, 100.0], vec![3.0]];
        let m = vec![vec![1.0, 0.0], vec![1.0]];
        masked_whiten(&mut a, &m);
        // masked values 1, 3: mean 2, unbiased var 2 -> z = -1/sqrt2, +1/sqrt2
        let s = 2f32.sqrt();
        assert!((a[0][0] + 1.0 / s).abs() < 1e-6);
        assert!((a[1][0] - 1.0 / s).abs() < 1e-6);
        assert!((a[0][1] - 98.0 / s).abs() < 1e-4);
    }

    #[test]
    fn grpo_is_the_normalised_score_with_a_uid_per_trajectory() {
        // #9: RAGEN gives each trajectory its own uid, so verl sees groups of one (mean 0, std 1):
        // one env group scoring [1, 0] gives [1 / (1 + 1e-6), 0] = [0.999999000001, 0] (not the
        // within-group [0.707, -0.707]), and [1, 0] without the std division.
        let a = grpo_outcome(&[1.0, 0.0], &[0, 0], true, 1e-6);
        assert_eq!(a, vec![1.0 / 1.000001, 0.0]);
        assert!((a[0] - 0.999999000001).abs() < 1e-15);
        assert_eq!(
            grpo_outcome(&[1.0, 0.0], &[0, 0], false, 1e-6),
            vec![1.0, 0.0]
        );
        // With mean_std normalisation first (RAGEN's train_all.sh GRPO), a group [1, 0] becomes
        // +-0.5 / (sqrt(0.5) + 1e-6), and the estimator divides once more by 1 + 1e-6.
        let z = normalize_scores(&[1.0, 0.0, 3.0, 3.0], &[0, 0, 1, 1], NormMethod::MeanStd);
        let a = grpo_outcome(&z, &[0, 0, 1, 1], true, 1e-6);
        let s = 0.5f64.sqrt();
        assert!((a[0] - 0.5 / (s + 1e-6) / (1.0 + 1e-6)).abs() < 1e-12);
        assert!((a[1] + 0.5 / (s + 1e-6) / (1.0 + 1e-6)).abs() < 1e-12);
        assert_eq!(&a[2..], &[0.0, 0.0]);
    }

    #[test]
    fn constant_groups_normalise_to_exact_zero() {
        // #9: eight scores of 10.7 have a computed std of ~1.9e-15 by the textbook formula;
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
    fn kl_estimators() {
        assert_eq!(kl_estimate(-1.0, -1.5, KlType::K1), 0.5);
        // k3 with ref - logp = -0.5: e^-0.5 + 0.5 - 1
        assert!((kl_estimate(-1.0, -1.5, KlType::K3) - ((-0.5f32).exp() - 0.5)).abs() < 1e-6);
        assert_eq!(kl_estimate(-2.0, -2.0, KlType::K3), 0.0);
    }

    #[test]
    fn normalisation_is_skipped_with_one_sample_per_group() {
        // Spec §4.4: normalise only when #groups < batch size; otherwise scores pass through.
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
}
