//! The StarPO-S rollout filter (paper §4.3; `docs/ragen-semantics.md` §6; RAGEN
//! `ragen/trainer/agent_trainer.py::_filter_rollout`,
//! RAGEN-2 `rollout_filter.py`).

use crate::config::{Config, FilterStrategy, FilterType};
use crate::metrics::Metrics;
use crate::stats::{mean, std_unbiased};
use std::collections::BTreeSet;

/// In-group statistics of one env group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupStats {
    /// Unbiased std of the trajectory scores (torch `std`; NaN-free: 0 for one member; exactly 0
    /// when max == min, see [`crate::stats::all_equal`]).
    pub std: f64,
    /// Largest score.
    pub max: f64,
    /// Mean score.
    pub mean: f64,
}

/// Result of the filter.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterOutcome {
    /// Indices of the kept groups, in ranking order.
    pub kept_groups: Vec<usize>,
    /// Stats of every group.
    pub all: Vec<GroupStats>,
    /// `rollout/in_group_{std,max,mean}` and `rollout/chosen_in_group_{std,max,mean}`.
    pub metrics: Metrics,
}

impl FilterOutcome {
    /// The verdict on every group, by group index: its in-group std and whether it was kept.
    pub fn verdicts(&self) -> Vec<GroupVerdict> {
        (0..self.all.len())
            .map(|g| GroupVerdict {
                std: self.all[g].std,
                kept: self.kept_groups.contains(&g),
            })
            .collect()
    }
}

/// The filter's verdict on one env group: what `trajectories.jsonl` records beside each of its
/// trajectories (`in_group_std`, `filter_kept`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupVerdict {
    /// The std of the group's training scores, the value the filter ranks (NaN for a group
    /// with a non-finite score).
    pub std: f64,
    /// Whether the group's trajectories went into the update.
    pub kept: bool,
}

/// Filter settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FilterParams {
    /// `rollout_filter_ratio` (top-k: keep `int(ratio * groups)`; 1 = off).
    pub ratio: f64,
    /// `std` (highest first) or `std_rev` (lowest first).
    pub kind: FilterType,
    /// RAGEN v1 top-k or RAGEN-2 top-p.
    pub strategy: FilterStrategy,
    /// p for top-p.
    pub top_p: f64,
    /// Top-p: whether zero-std groups may be kept.
    pub include_zero: bool,
}

impl FilterParams {
    /// The filter settings of the `[rollout]` section (`rollout_filter_value` is top-p's `p`).
    pub fn from_config(cfg: &Config) -> Self {
        let r = &cfg.rollout;
        Self {
            ratio: r.rollout_filter_ratio,
            kind: r.rollout_filter_type,
            strategy: r.rollout_filter_strategy,
            top_p: r.rollout_filter_value,
            include_zero: r.rollout_filter_include_zero,
        }
    }
}

/// Per-group stats of `scores` laid out group-major (`scores[g * group_size + i]`).
pub fn group_stats(scores: &[f64], group_size: usize) -> Vec<GroupStats> {
    scores
        .chunks(group_size)
        .map(|g| GroupStats {
            std: std_unbiased(g),
            max: g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean: mean(g),
        })
        .collect()
}

/// Rank groups by in-group score std and keep whole groups. Groups in `excluded` (a failed
/// plugin, a non-finite score, a trajectory without a turn: [`crate::failure_policy`]) are
/// never kept and left out of the statistics; the others are ranked as if they were all.
///
/// * top-k (RAGEN v1): `k = int(ratio * n_groups)` (at least 1); `ratio >= 1` keeps every group
///   (metrics only). Ties keep the lower group index first.
/// * top-p (RAGEN-2, linear mode): groups sorted by std; each group's mass is `std / sum(std)`;
///   the shortest prefix whose mass reaches `p` is kept. Zero-std groups are dropped unless
///   `include_zero`; if every std is zero the prefix is empty unless `include_zero`, which keeps all.
pub fn filter_groups(
    scores: &[f64],
    group_size: usize,
    excluded: &BTreeSet<usize>,
    p: &FilterParams,
) -> FilterOutcome {
    let all = group_stats(scores, group_size);
    let n = all.len();
    let mut order: Vec<usize> = (0..n).filter(|g| !excluded.contains(g)).collect();
    let usable = order.len();
    match p.kind {
        FilterType::Std => order.sort_by(|&a, &b| all[b].std.total_cmp(&all[a].std)),
        FilterType::StdRev => order.sort_by(|&a, &b| all[a].std.total_cmp(&all[b].std)),
    }
    let kept_groups: Vec<usize> = match p.strategy {
        FilterStrategy::TopK if p.ratio >= 1.0 => {
            order.sort_unstable();
            order
        }
        FilterStrategy::TopK => {
            // RAGEN's k of all groups, taken among the usable ones
            let k = ((p.ratio * n as f64) as usize).max(1).min(usable);
            order.into_iter().take(k).collect()
        }
        FilterStrategy::TopP => {
            let candidates: Vec<usize> = order
                .into_iter()
                .filter(|&g| p.include_zero || all[g].std > 0.0)
                .collect();
            let total: f64 = candidates.iter().map(|&g| all[g].std).sum();
            if total <= 0.0 {
                candidates
            } else {
                let mut acc = 0.0;
                let mut kept = Vec::new();
                for g in candidates {
                    if acc >= p.top_p * total {
                        break;
                    }
                    acc += all[g].std;
                    kept.push(g);
                }
                kept
            }
        }
    };
    let avg = |xs: &[GroupStats], f: fn(&GroupStats) -> f64| {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().map(f).sum::<f64>() / xs.len() as f64
        }
    };
    let chosen: Vec<GroupStats> = kept_groups.iter().map(|&g| all[g]).collect();
    let counted: Vec<GroupStats> = (0..n)
        .filter(|g| !excluded.contains(g))
        .map(|g| all[g])
        .collect();
    let metrics = Metrics::from([
        ("rollout/in_group_std".to_string(), avg(&counted, |s| s.std)),
        ("rollout/in_group_max".to_string(), avg(&counted, |s| s.max)),
        (
            "rollout/in_group_mean".to_string(),
            avg(&counted, |s| s.mean),
        ),
        (
            "rollout/chosen_in_group_std".to_string(),
            avg(&chosen, |s| s.std),
        ),
        (
            "rollout/chosen_in_group_max".to_string(),
            avg(&chosen, |s| s.max),
        ),
        (
            "rollout/chosen_in_group_mean".to_string(),
            avg(&chosen, |s| s.mean),
        ),
    ]);
    FilterOutcome {
        kept_groups,
        all,
        metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ratio: f64, kind: FilterType) -> FilterParams {
        FilterParams {
            ratio,
            kind,
            strategy: FilterStrategy::TopK,
            top_p: 0.9,
            include_zero: true,
        }
    }

    // 4 groups of 2: stds (unbiased) = |a-b|/sqrt(2): 0, 1/sqrt2, 2/sqrt2, 0.5/sqrt2
    const SCORES: [f64; 8] = [1.0, 1.0, 0.0, 1.0, -1.0, 1.0, 0.5, 0.0];

    #[test]
    fn keeps_top_quarter_by_std() {
        let out = filter_groups(&SCORES, 2, &BTreeSet::new(), &params(0.5, FilterType::Std));
        assert_eq!(out.kept_groups, vec![2, 1]);
        let s2 = std::f64::consts::SQRT_2;
        assert!((out.all[2].std - 2.0 / s2).abs() < 1e-12);
        let m = out.metrics;
        assert!(
            (m["rollout/in_group_std"] - (0.0 + 1.0 / s2 + 2.0 / s2 + 0.5 / s2) / 4.0).abs()
                < 1e-12
        );
        assert!((m["rollout/chosen_in_group_std"] - (2.0 / s2 + 1.0 / s2) / 2.0).abs() < 1e-12);
        assert!((m["rollout/chosen_in_group_max"] - 1.0).abs() < 1e-12);
        assert!((m["rollout/chosen_in_group_mean"] - (0.0 + 0.5) / 2.0).abs() < 1e-12);
        assert!((m["rollout/in_group_mean"] - (1.0 + 0.5 + 0.0 + 0.25) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn std_rev_and_ratio_one() {
        let out = filter_groups(
            &SCORES,
            2,
            &BTreeSet::new(),
            &params(0.25, FilterType::StdRev),
        );
        assert_eq!(out.kept_groups, vec![0]);
        let out = filter_groups(&SCORES, 2, &BTreeSet::new(), &params(1.0, FilterType::Std));
        assert_eq!(out.kept_groups, vec![0, 1, 2, 3]);
    }

    #[test]
    fn top_p_linear() {
        // std masses (x sqrt2): 2, 1, 0.5, 0 of 3.5 total; p = 0.8 needs 2.8: groups 2, 1 (3.0).
        let p = FilterParams {
            ratio: 1.0,
            kind: FilterType::Std,
            strategy: FilterStrategy::TopP,
            top_p: 0.8,
            include_zero: false,
        };
        assert_eq!(
            filter_groups(&SCORES, 2, &BTreeSet::new(), &p).kept_groups,
            vec![2, 1]
        );
        let p = FilterParams { top_p: 1.0, ..p };
        assert_eq!(
            filter_groups(&SCORES, 2, &BTreeSet::new(), &p).kept_groups,
            vec![2, 1, 3]
        );
        let zeros = [1.0, 1.0, 0.0, 0.0];
        assert!(
            filter_groups(&zeros, 2, &BTreeSet::new(), &p)
                .kept_groups
                .is_empty()
        );
    }

    #[test]
    fn excluded_groups_are_never_kept_nor_counted() {
        // group 2 (std 2/sqrt2) failed and group 3 holds a NaN: the best usable group is 1, and
        // top-k still keeps int(0.5 * 4) = 2 groups, of the usable ones
        let mut s = SCORES;
        s[7] = f64::NAN;
        let out = filter_groups(
            &s,
            2,
            &BTreeSet::from([2, 3]),
            &params(0.5, FilterType::Std),
        );
        assert_eq!(out.kept_groups, vec![1, 0]);
        let s2 = std::f64::consts::SQRT_2;
        let m = &out.metrics;
        assert!((m["rollout/in_group_std"] - (0.0 + 1.0 / s2) / 2.0).abs() < 1e-12);
        assert!((m["rollout/in_group_mean"] - (1.0 + 0.5) / 2.0).abs() < 1e-12);
        assert!(m.values().all(|v| v.is_finite()), "{m:?}");
        let all = filter_groups(
            &s,
            2,
            &BTreeSet::from([2, 3]),
            &params(1.0, FilterType::Std),
        );
        assert_eq!(all.kept_groups, vec![0, 1]);
        let p = FilterParams {
            strategy: FilterStrategy::TopP,
            top_p: 1.0,
            ..params(1.0, FilterType::Std)
        };
        assert_eq!(
            filter_groups(&s, 2, &BTreeSet::from([2, 3]), &p).kept_groups,
            vec![1]
        );
        // nothing usable: nothing kept, and the statistics are 0, not NaN
        let none = filter_groups(
            &s,
            2,
            &BTreeSet::from([0, 1, 2, 3]),
            &params(0.5, FilterType::Std),
        );
        assert!(none.kept_groups.is_empty());
        assert_eq!(none.metrics["rollout/in_group_std"], 0.0);
    }

    #[test]
    fn constant_groups_never_outrank_or_pass_top_p() {
        // A group of eight 10.7s has a textbook std of ~1.9e-15. It must tie with the
        // all-zero group (std exactly 0, lower index first) and fall out of top-p.
        let mut s = vec![0.0; 8];
        s.extend([10.7; 8]);
        s.extend([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let out = filter_groups(&s, 8, &BTreeSet::new(), &params(2.0 / 3.0, FilterType::Std));
        assert_eq!(out.all[1].std, 0.0);
        assert_eq!(out.all[1].mean, 10.7);
        assert_eq!(out.kept_groups, vec![2, 0]);
        let out = filter_groups(
            &s,
            8,
            &BTreeSet::new(),
            &params(1.0 / 3.0, FilterType::StdRev),
        );
        assert_eq!(out.kept_groups, vec![0]);
        let p = FilterParams {
            ratio: 1.0,
            kind: FilterType::Std,
            strategy: FilterStrategy::TopP,
            top_p: 1.0,
            include_zero: false,
        };
        assert_eq!(
            filter_groups(&s, 8, &BTreeSet::new(), &p).kept_groups,
            vec![2]
        );
    }
}
