//! Advantages (`docs/ragen-semantics.md` §7; verl `verl/trainer/ppo/core_algos.py`): the
//! estimators (GAE with whitening, GRPO), the KL penalty in the reward, and [`estimate`], which
//! scores a batch with the actor, the reference and the critic and turns it into advantages and
//! returns.
//!
//! Per-token arrays are indexed by *response position* `j` (predicting token `j + 1` of the
//! sequence), length `L - 1` for a sequence of `L` tokens, like verl's `responses` tensors.

use crate::batch::TrainSample;
use crate::config::{AdvEstimator, AlgorithmConfig, KlType};
use crate::metrics::{Metrics, add_stats};

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
/// done before, here [`crate::rewards::normalize_scores`]). So the advantage is `R / (1 + eps)` (`R` without
/// `norm_by_std`): one env group scoring `[1, 0]` gives `[1 / (1 + 1e-6), 0]`, not
/// `[0.707, -0.707]`. `eps` is 1e-6 in verl. The caller broadcasts the result over the
/// trajectory's loss mask.
pub fn grpo_outcome(scores: &[f64], norm_by_std: bool, eps: f64) -> Vec<f64> {
    // A uid of one: mean 0, std 1.
    scores
        .iter()
        .map(|s| if norm_by_std { s / (1.0 + eps) } else { *s })
        .collect()
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

/// Where one of an update's estimates comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Source {
    /// Computed before the update: one row per sample.
    #[default]
    Scored,
    /// Left to the update, which computes it from its own forward (the old log-probs and values
    /// of an update that is one optimiser step, `trainer.scoring_from_update`) or, for GAE's
    /// advantages and returns, from those values; empty until the update fills it.
    FromUpdate,
    /// Not part of this run (no reference policy, no critic): stays empty.
    Absent,
}

/// Where each estimate of [`Estimates`] comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sources {
    /// The actor's old log-probs.
    pub old_logp: Source,
    /// The reference policy's log-probs.
    pub ref_logp: Source,
    /// The critic's values.
    pub values: Source,
    /// The advantages and returns.
    pub advantages: Source,
}

/// The per-sample arrays of one update, each as long as its sample's `loss_mask`, and where
/// each comes from ([`Sources`]; an empty array means only what its source says).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Estimates {
    /// Where each array comes from.
    pub sources: Sources,
    /// Log-probs of the actor before the update (verl `old_log_probs`).
    pub old_logp: Vec<Vec<f32>>,
    /// Log-probs of the reference policy (empty without one).
    pub ref_logp: Vec<Vec<f32>>,
    /// The critic's values (empty without a critic).
    pub values: Vec<Vec<f32>>,
    /// Advantages.
    pub advantages: Vec<Vec<f32>>,
    /// Returns (the critic's targets).
    pub returns: Vec<Vec<f32>>,
}

/// Token rewards, the KL penalty in the reward (when `use_kl_in_reward` and a reference exists),
/// then GAE with whitening, GRPO, or GRPO plus GiGPO's step level ([`crate::gigpo`]). Returns `(advantages, returns)` and adds
/// `critic/{advantages,returns,values}/{mean,max,min}` over the trained positions.
pub fn advantages(
    alg: &AlgorithmConfig,
    samples: &[TrainSample],
    old_logp: &[Vec<f32>],
    ref_logp: &[Vec<f32>],
    values: &[Vec<f32>],
    m: &mut Metrics,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut rewards: Vec<Vec<f32>> = samples.iter().map(|s| s.token_rewards.clone()).collect();
    if alg.use_kl_in_reward && !ref_logp.is_empty() {
        // verl `ray_trainer.py::apply_kl_penalty` with a fixed coefficient.
        let coef = alg.kl_coef as f32;
        for ((r, s), (o, rf)) in rewards
            .iter_mut()
            .zip(samples)
            .zip(old_logp.iter().zip(ref_logp))
        {
            for j in 0..r.len() {
                r[j] -= coef * kl_estimate(o[j], rf[j], alg.kl_penalty) * s.loss_mask[j];
            }
        }
    }
    let masks: Vec<Vec<f32>> = samples.iter().map(|s| s.loss_mask.clone()).collect();
    let (adv, returns) = match alg.adv_estimator {
        AdvEstimator::Gae => {
            let (g, l) = (alg.gamma as f32, alg.lam as f32);
            let (mut adv, mut ret) = (Vec::new(), Vec::new());
            for ((r, v), mask) in rewards.iter().zip(values).zip(&masks) {
                let (a, rt) = gae(r, v, mask, g, l);
                adv.push(a);
                ret.push(rt);
            }
            masked_whiten(&mut adv, &masks);
            (adv, ret)
        }
        AdvEstimator::Grpo | AdvEstimator::Gigpo => {
            let scores: Vec<f64> = rewards
                .iter()
                .map(|r| r.iter().map(|x| f64::from(*x)).sum())
                .collect();
            let a = grpo_outcome(&scores, alg.norm_adv_by_std_in_grpo, 1e-6);
            let adv: Vec<Vec<f32>> = if alg.adv_estimator == AdvEstimator::Gigpo {
                crate::gigpo::advantages(samples, &a, &alg.gigpo, m)
            } else {
                masks
                    .iter()
                    .zip(&a)
                    .map(|(mask, a)| mask.iter().map(|w| w * *a as f32).collect())
                    .collect()
            };
            (adv.clone(), adv)
        }
    };
    let trained = |rows: &[Vec<f32>]| -> Vec<f64> {
        rows.iter()
            .zip(&masks)
            .flat_map(|(r, mask)| {
                r.iter()
                    .zip(mask)
                    .filter(|(_, w)| **w > 0.0)
                    .map(|(x, _)| f64::from(*x))
            })
            .collect()
    };
    add_stats(m, "critic/advantages", &trained(&adv));
    let rets = trained(&returns);
    add_stats(m, "critic/returns", &rets);
    if !values.is_empty() {
        let vals = trained(values);
        add_stats(m, "critic/values", &vals);
        m.insert(
            "critic/vf_explained_var".into(),
            explained_variance(&rets, &vals),
        );
    }
    (adv, returns)
}

/// How far the trainer's old log-probs are from the sampler's, over the trained tokens of the
/// samples that carry the sampler's log-probs (constrained decoding): verl's
/// `training/rollout_probs_diff_max` and `_mean` (`verl/utils/debug/metrics.py::calculate_debug_metrics`,
/// a verl newer than RAGEN's), the absolute difference of the two probabilities. Near 0 when the
/// update is on-policy (same tokens, same restriction, same weights); empty when no sample has
/// sampler log-probs.
pub fn rollout_probs_diff(samples: &[TrainSample], old_logp: &[Vec<f32>]) -> Metrics {
    let mut diffs = Vec::new();
    for (s, old) in samples.iter().zip(old_logp) {
        if s.rollout_logp.is_empty() {
            continue;
        }
        for ((w, a), b) in s.loss_mask.iter().zip(&s.rollout_logp).zip(old) {
            if *w > 0.0 {
                diffs.push((f64::from(*a).exp() - f64::from(*b).exp()).abs());
            }
        }
    }
    let mut m = Metrics::new();
    if !diffs.is_empty() {
        m.insert(
            "training/rollout_probs_diff_max".into(),
            diffs.iter().copied().fold(0.0, f64::max),
        );
        m.insert(
            "training/rollout_probs_diff_mean".into(),
            crate::stats::mean(&diffs),
        );
    }
    m
}

/// How much of the returns' variance the critic's values explain, verl's
/// `critic/vf_explained_var` (`verl/trainer/ppo/metric_utils.py::compute_data_metrics`):
/// `1 - var(returns - values) / (var(returns) + 1e-5)`, unbiased variances over the trained
/// positions. 1 for a perfect critic, 0 for one that predicts the mean, negative when worse.
pub fn explained_variance(returns: &[f64], values: &[f64]) -> f64 {
    let diff: Vec<f64> = returns.iter().zip(values).map(|(r, v)| r - v).collect();
    1.0 - crate::stats::var_unbiased(&diff) / (crate::stats::var_unbiased(returns) + 1e-5)
}

/// Mean of `rows` over the trained positions of `samples` (0 when none is trained).
#[cfg(feature = "trainer")]
fn masked_mean_rows(rows: &[Vec<f32>], samples: &[TrainSample]) -> f64 {
    let (mut s, mut n) = (0.0f64, 0.0f64);
    for (r, smp) in rows.iter().zip(samples) {
        for (x, w) in r.iter().zip(&smp.loss_mask) {
            s += f64::from(*x * *w);
            n += f64::from(*w);
        }
    }
    if n > 0.0 { s / n } else { 0.0 }
}

/// The models that score a batch before the update.
#[cfg(feature = "trainer")]
pub struct Scorers<'a> {
    /// The actor as it is before the update.
    pub actor: &'a ragen_gym_policy::LlamaModel,
    /// The reference policy, if the run has one.
    pub reference: Option<&'a ragen_gym_policy::LlamaModel>,
    /// The critic, if the run has one (GAE).
    pub critic: Option<&'a ragen_gym_policy::Critic>,
    /// The padding token id.
    pub pad_id: u32,
}

/// Which scoring passes run before the update (`docs/ragen-semantics.md` §1 step 4). A pass
/// that does not run is taken from the update's own forward (`trainer.scoring_from_update`):
/// the actor's old log-probs when the actor takes one optimiser step this iteration (PPO's ratio
/// is then exactly 1), the critic's old values when the critic takes one. Both need rewards that
/// do not depend on them, so a KL penalty in the reward keeps the passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoringPasses {
    /// Score the old log-probs with the actor before the update.
    pub old_logp: bool,
    /// Score the old values with the critic before the update (runs with a critic).
    pub values: bool,
}

#[cfg(feature = "trainer")]
impl ScoringPasses {
    /// The passes of iteration `iteration` (1-based) over `samples` kept samples.
    pub fn for_update(cfg: &crate::config::Config, samples: usize, iteration: u32) -> Self {
        use crate::schedule::{actor_updates_at, is_one_step};
        let reuse = cfg.trainer.scoring_from_update
            && is_one_step(cfg, samples)
            && !cfg.algorithm.use_kl_in_reward;
        Self {
            old_logp: !(reuse && actor_updates_at(cfg, iteration)),
            values: !reuse,
        }
    }
}

/// `rollout/old_log_prob` (the mean old log-prob over the trained tokens) and verl's
/// `training/rollout_probs_diff_*` ([`rollout_probs_diff`]), from the old log-probs of `samples`.
#[cfg(feature = "trainer")]
pub fn old_logp_metrics(samples: &[TrainSample], old_logp: &[Vec<f32>], m: &mut Metrics) {
    m.insert(
        "rollout/old_log_prob".into(),
        masked_mean_rows(old_logp, samples),
    );
    m.extend(rollout_probs_diff(samples, old_logp));
}

/// Score `samples` in the passes of [`crate::passes::plan`] with the scorers `passes` asks
/// for (old log-probs, values) and the reference, then compute the advantages
/// (`docs/ragen-semantics.md` §1 steps 4 and 5), unless they need values the update's critic
/// forward will supply (GAE without the values pass: `advantages` is then empty and
/// [`crate::update::update`] computes them). Adds `timing_s/old_log_prob`,
/// `rollout/ref_log_prob`, [`old_logp_metrics`] when the old log-probs were scored, and
/// `timing_s/adv` and the stats of [`advantages`] when they were computed. `on_progress` gets the
/// samples scored so far.
#[cfg(feature = "trainer")]
pub fn estimate(
    cfg: &crate::config::Config,
    scorers: &Scorers<'_>,
    samples: &[TrainSample],
    passes: ScoringPasses,
    m: &mut Metrics,
    on_progress: &mut dyn FnMut(usize),
) -> ragen_gym_policy::Result<Estimates> {
    use crate::batch::tensors::{rows_of, token_batch};
    use ragen_gym_policy as pol;
    let t = std::time::Instant::now();
    let (mut old_logp, mut ref_logp, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let critic = scorers.critic.filter(|_| passes.values);
    if passes.old_logp || scorers.reference.is_some() || critic.is_some() {
        let mut scored = 0;
        let (a, idx) = (&cfg.actor, (0..samples.len()).collect::<Vec<usize>>());
        for pass in crate::passes::plan(samples, &idx, a.micro_batch_size, a.max_tokens_per_pass) {
            let refs: Vec<&TrainSample> = pass
                .iter()
                .flat_map(|mc| mc.iter())
                .map(|&i| &samples[i])
                .collect();
            let batch = token_batch(&refs, scorers.pad_id)?;
            if passes.old_logp {
                let lp = pol::score(scorers.actor, &batch)?.logprobs;
                old_logp.extend(rows_of(&lp, &refs)?);
            }
            if let Some(r) = scorers.reference {
                ref_logp.extend(rows_of(&pol::score(r, &batch)?.logprobs, &refs)?);
            }
            if let Some(c) = critic {
                let v = c.values(&batch)?.detach();
                values.extend(rows_of(&v.narrow(1, 0, batch.seq_len() - 1)?, &refs)?);
            }
            scored += refs.len();
            on_progress(scored);
        }
    }
    m.insert("timing_s/old_log_prob".into(), t.elapsed().as_secs_f64());
    if passes.old_logp {
        old_logp_metrics(samples, &old_logp, m);
    }
    if !ref_logp.is_empty() {
        m.insert(
            "rollout/ref_log_prob".into(),
            masked_mean_rows(&ref_logp, samples),
        );
    }
    let from = |scored: bool, exists: bool| match (exists, scored) {
        (false, _) => Source::Absent,
        (true, true) => Source::Scored,
        (true, false) => Source::FromUpdate,
    };
    let mut est = Estimates {
        sources: Sources {
            old_logp: from(passes.old_logp, true),
            ref_logp: from(true, scorers.reference.is_some()),
            values: from(passes.values, scorers.critic.is_some()),
            advantages: Source::FromUpdate,
        },
        old_logp,
        ref_logp,
        values,
        ..Estimates::default()
    };
    if est.sources.values != Source::FromUpdate {
        est.estimate_advantages(&cfg.algorithm, samples, m);
    }
    Ok(est)
}

impl Estimates {
    /// Fill `advantages` and `returns` from the rewards, the values and (for a KL penalty in the
    /// reward) the old and reference log-probs; adds `timing_s/adv` and the stats of
    /// [`advantages`].
    pub fn estimate_advantages(
        &mut self,
        alg: &AlgorithmConfig,
        samples: &[TrainSample],
        m: &mut Metrics,
    ) {
        let t = std::time::Instant::now();
        let (adv, returns) = advantages(
            alg,
            samples,
            &self.old_logp,
            &self.ref_logp,
            &self.values,
            m,
        );
        self.advantages = adv;
        self.returns = returns;
        self.sources.advantages = Source::Scored;
        m.insert("timing_s/adv".into(), t.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NormMethod;
    use crate::rewards::normalize_scores;

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
        // RAGEN gives each trajectory its own uid (`docs/ragen-semantics.md` §7), so verl sees
        // groups of one (mean 0, std 1): one env group scoring [1, 0] gives [1 / (1 + 1e-6), 0] =
        // [0.999999000001, 0] (not the within-group [0.707, -0.707]), and [1, 0] without the std
        // division.
        let a = grpo_outcome(&[1.0, 0.0], true, 1e-6);
        assert_eq!(a, vec![1.0 / 1.000001, 0.0]);
        assert!((a[0] - 0.999999000001).abs() < 1e-15);
        assert_eq!(grpo_outcome(&[1.0, 0.0], false, 1e-6), vec![1.0, 0.0]);
        // With mean_std normalisation first (RAGEN's train_all.sh GRPO), a group [1, 0] becomes
        // +-0.5 / (sqrt(0.5) + 1e-6), and the estimator divides once more by 1 + 1e-6.
        let z = normalize_scores(&[1.0, 0.0, 3.0, 3.0], &[0, 0, 1, 1], NormMethod::MeanStd);
        let a = grpo_outcome(&z, true, 1e-6);
        let s = 0.5f64.sqrt();
        assert!((a[0] - 0.5 / (s + 1e-6) / (1.0 + 1e-6)).abs() < 1e-12);
        assert!((a[1] + 0.5 / (s + 1e-6) / (1.0 + 1e-6)).abs() < 1e-12);
        assert_eq!(&a[2..], &[0.0, 0.0]);
    }

    fn sample(rewards: Vec<f32>, mask: Vec<f32>) -> TrainSample {
        TrainSample {
            input_ids: vec![0; rewards.len() + 1],
            loss_mask: mask,
            token_rewards: rewards,
            choices: Vec::new(),
            rollout_logp: Vec::new(),
            group: 0,
            index: 0,
            turns: Vec::new(),
        }
    }

    #[test]
    fn kl_in_reward_then_grpo_by_hand() {
        // Two samples of 3 positions, score on the last one. With k1 KL (logp - ref) = 0.5 on
        // every trained position and kl_coef 0.2, each trained position loses 0.1:
        // sample 0 (mask 0 1 1): 1 - 0.2 = 0.8; sample 1 (mask 1 1 1): 0 - 0.3 = -0.3.
        let samples = [
            sample(vec![0.0, 0.0, 1.0], vec![0.0, 1.0, 1.0]),
            sample(vec![0.0, 0.0, 0.0], vec![1.0, 1.0, 1.0]),
        ];
        let old = vec![vec![-1.0; 3], vec![-2.0; 3]];
        let reference = vec![vec![-1.5; 3], vec![-2.5; 3]];
        let mut alg = crate::config::Config::default_config().algorithm;
        alg.adv_estimator = AdvEstimator::Grpo;
        alg.use_kl_in_reward = true;
        alg.kl_coef = 0.2;
        alg.kl_penalty = KlType::K1;
        let mut m = Metrics::new();
        let (adv, ret) = advantages(&alg, &samples, &old, &reference, &[], &mut m);
        let a0 = (0.8f64 / (1.0 + 1e-6)) as f32;
        let a1 = (-0.3f64 / (1.0 + 1e-6)) as f32;
        assert!((adv[0][1] - a0).abs() < 1e-6 && adv[0][0] == 0.0, "{adv:?}");
        assert!(adv[1].iter().all(|x| (x - a1).abs() < 1e-6), "{adv:?}");
        assert_eq!(adv, ret);
        // stats over the 5 trained positions: 2 x a0 and 3 x a1
        let want = (2.0 * f64::from(a0) + 3.0 * f64::from(a1)) / 5.0;
        assert!((m["critic/advantages/mean"] - want).abs() < 1e-6);
        assert!(!m.contains_key("critic/values/mean"));
        // without the flag the reference changes nothing
        alg.use_kl_in_reward = false;
        let (adv, _) = advantages(&alg, &samples, &old, &reference, &[], &mut m);
        assert!((adv[0][2] - (1.0f64 / (1.0 + 1e-6)) as f32).abs() < 1e-6);
    }

    #[test]
    fn explained_variance_as_verl() {
        // returns 0, 1, 2, 3 (unbiased var 5/3); values 0, 1, 2, 2 leave residuals 0, 0, 0, 1
        // (mean 1/4, unbiased var 1/4): 1 - (1/4) / (5/3 + 1e-5).
        let ev = explained_variance(&[0.0, 1.0, 2.0, 3.0], &[0.0, 1.0, 2.0, 2.0]);
        assert!(
            (ev - (1.0 - 0.25 / (5.0 / 3.0 + 1e-5))).abs() < 1e-12,
            "{ev}"
        );
        // a perfect critic explains everything, one constant at the mean nothing
        assert_eq!(explained_variance(&[0.0, 1.0], &[0.0, 1.0]), 1.0);
        let ev = explained_variance(&[0.0, 1.0], &[0.5, 0.5]);
        assert!((ev - (1.0 - 0.5 / (0.5 + 1e-5))).abs() < 1e-12, "{ev}");
    }

    #[test]
    fn kl_estimators() {
        assert_eq!(kl_estimate(-1.0, -1.5, KlType::K1), 0.5);
        // k3 with ref - logp = -0.5: e^-0.5 + 0.5 - 1
        assert!((kl_estimate(-1.0, -1.5, KlType::K3) - ((-0.5f32).exp() - 0.5)).abs() < 1e-6);
        assert_eq!(kl_estimate(-2.0, -2.0, KlType::K3), 0.0);
    }
}
