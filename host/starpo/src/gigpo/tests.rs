//! Hand-computed GiGPO advantages: the arithmetic is in each test's comments.

use super::*;
use crate::batch::TurnStep;
use crate::config::Config;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn close_all(got: &[Vec<f64>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{got:?} vs {want:?}");
        assert!(
            g.iter().zip(w).all(|(a, b)| close(*a, *b)),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn discount_runs_backwards_over_the_turn_rewards() {
    // gamma 0.5, rewards [1, 0, 2]: G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 1 + 0.5 * 1 = 1.5.
    assert_eq!(
        discounted_returns(&[1.0, 0.0, 2.0], 0.5),
        vec![1.5, 1.0, 2.0]
    );
    // gamma 1: suffix sums; gamma 0: the turn's own reward.
    assert_eq!(
        discounted_returns(&[1.0, 0.0, 2.0], 1.0),
        vec![3.0, 2.0, 2.0]
    );
    assert_eq!(
        discounted_returns(&[1.0, 0.0, 2.0], 0.0),
        vec![1.0, 0.0, 2.0]
    );
    // gamma 0.95 (the default), a reward of 1 two turns later: 0.95^2 = 0.9025.
    let g = discounted_returns(&[0.0, 0.0, 1.0], 0.95);
    assert!(
        close(g[0], 0.9025) && close(g[1], 0.95) && g[2] == 1.0,
        "{g:?}"
    );
    assert!(discounted_returns(&[], 0.95).is_empty());
}

/// Three members of env group 0 start from `s0`. A and B then both reach `s1`, C reaches `s2`.
/// Turn rewards A [0, 1], B [0, 0], C [0, 1]; gamma 0.95.
fn shared_anchor_case() -> (Vec<Vec<f64>>, Vec<Vec<usize>>) {
    let anchors = vec![
        (0, vec!["s0", "s1"]),
        (0, vec!["s0", "s1"]),
        (0, vec!["s0", "s2"]),
    ];
    let groups = step_groups(&anchors);
    // ids in order of first appearance: s0 -> 0, s1 -> 1, s2 -> 2
    assert_eq!(groups, vec![vec![0, 1], vec![0, 1], vec![0, 2]]);
    let returns: Vec<Vec<f64>> = [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]
        .iter()
        .map(|r| discounted_returns(r, 0.95))
        .collect();
    // A: G1 = 1, G0 = 0.95; B: 0, 0; C: G1 = 1, G0 = 0.95
    close_all(
        &returns,
        &[vec![0.95, 1.0], vec![0.0, 0.0], vec![0.95, 1.0]],
    );
    (returns, groups)
}

#[test]
fn identical_anchors_across_members_mean_norm() {
    let (returns, groups) = shared_anchor_case();
    let a = step_advantages(&returns, &groups, GigpoMode::MeanNorm);
    // s0 = {0.95, 0, 0.95}: mean 1.9 / 3 = 0.633333..., so A0 = C0 = 0.95 - 0.633333 = 0.316667
    // and B0 = -0.633333. s1 = {1, 0}: mean 0.5, A1 = 0.5, B1 = -0.5. s2 = {C1} alone: 0.
    let m0 = 1.9 / 3.0;
    close_all(
        &a,
        &[vec![0.95 - m0, 0.5], vec![-m0, -0.5], vec![0.95 - m0, 0.0]],
    );
}

#[test]
fn identical_anchors_across_members_mean_std_norm() {
    let (returns, groups) = shared_anchor_case();
    let a = step_advantages(&returns, &groups, GigpoMode::MeanStdNorm);
    // s0: deviations 0.316667, -0.633333, 0.316667; squares 0.100278 + 0.401111 + 0.100278 =
    // 0.601667, / (3 - 1) = 0.300833, std = sqrt(0.300833) = 0.548483.
    // s1 = {1, 0}: std sqrt(0.5) = 0.707107, so +-0.5 / (0.707107 + 1e-6) = +-0.707106.
    // s2 alone: std 1, (1 - 1) / (1 + 1e-6) = 0.
    let m0 = 1.9 / 3.0;
    let sd0 = (((0.95 - m0) * (0.95 - m0) * 2.0 + m0 * m0) / 2.0f64).sqrt();
    assert!((sd0 - 0.548483).abs() < 1e-6, "{sd0}");
    let sd1 = 0.5f64.sqrt() + EPS;
    close_all(
        &a,
        &[
            vec![(0.95 - m0) / (sd0 + EPS), 0.5 / sd1],
            vec![-m0 / (sd0 + EPS), -0.5 / sd1],
            vec![(0.95 - m0) / (sd0 + EPS), 0.0],
        ],
    );
    // 0.5 / (sqrt(0.5) + 1e-6), about 1/sqrt(2)
    assert!(
        (a[0][1] - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-5,
        "{a:?}"
    );
}

#[test]
fn no_shared_anchors_give_no_step_advantage() {
    // Every turn has its own anchor, so every step group has one member. verl-agent's
    // `step_norm_reward` takes a group of one's mean to be its own return (and its std 1): the
    // step advantage is G - G = 0 in both modes, whatever the return.
    let anchors = vec![(0, vec!["a", "b"]), (0, vec!["c", "d"])];
    let groups = step_groups(&anchors);
    assert_eq!(groups, vec![vec![0, 1], vec![2, 3]]);
    let returns = vec![vec![3.0, -1.0], vec![0.5, 7.0]];
    for mode in [GigpoMode::MeanNorm, GigpoMode::MeanStdNorm] {
        let a = step_advantages(&returns, &groups, mode);
        assert_eq!(a, vec![vec![0.0, 0.0], vec![0.0, 0.0]], "{mode:?}");
    }
}

#[test]
fn anchors_group_only_within_an_env_group() {
    // The same text in env groups 0 and 1 (different seeds) is two step groups of one member
    // each: 0 advantage. Within group 0, the repeated anchor `x` of one trajectory (a turn that
    // changed nothing) groups with itself: returns 2 and 1 (rewards [1, 1], gamma 1), mean 1.5,
    // advantages +0.5 and -0.5.
    let anchors = vec![(0, vec!["x", "x"]), (1, vec!["x"])];
    let groups = step_groups(&anchors);
    assert_eq!(groups, vec![vec![0, 0], vec![1]]);
    let returns = vec![discounted_returns(&[1.0, 1.0], 1.0), vec![5.0]];
    let a = step_advantages(&returns, &groups, GigpoMode::MeanNorm);
    assert_eq!(a, vec![vec![0.5, -0.5], vec![0.0]]);
}

fn sample(
    group: usize,
    mask: Vec<f32>,
    turns: Vec<(std::ops::Range<usize>, &str, f64)>,
) -> TrainSample {
    TrainSample {
        input_ids: vec![0; mask.len() + 1],
        loss_mask: mask,
        token_rewards: Vec::new(),
        choices: Vec::new(),
        rollout_logp: Vec::new(),
        group,
        index: 0,
        turns: turns
            .into_iter()
            .map(|(positions, anchor, reward)| TurnStep {
                positions,
                anchor: anchor.into(),
                reward,
            })
            .collect(),
    }
}

#[test]
fn every_turns_tokens_get_episode_plus_weighted_step_advantage() {
    // Two members of group 0, two turns each, 8 positions; turn 0 spans 1..3, turn 1 spans 5..8,
    // position 0 and 4 (prompt and user message) are not trained.
    // Rewards: X [0, 1], Y [0, 0]; anchors X [s0, s1], Y [s0, s1]; gamma 0.5, weight 0.5.
    // Returns X [0.5, 1], Y [0, 0]. Step groups s0 {0.5, 0}: mean 0.25 -> X0 +0.25, Y0 -0.25;
    // s1 {1, 0}: mean 0.5 -> X1 +0.5, Y1 -0.5.
    // Episode advantages (given, GRPO's): X 0.5, Y -0.5.
    // X: turn 0 -> 0.5 + 0.5 * 0.25 = 0.625; turn 1 -> 0.5 + 0.5 * 0.5 = 0.75.
    // Y: turn 0 -> -0.5 - 0.125 = -0.625; turn 1 -> -0.5 - 0.25 = -0.75.
    let mask = vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
    let x = sample(0, mask.clone(), vec![(1..3, "s0", 0.0), (5..8, "s1", 1.0)]);
    let y = sample(0, mask, vec![(1..3, "s0", 0.0), (5..8, "s1", 0.0)]);
    let mut cfg = Config::default_config().algorithm.gigpo;
    cfg.gamma = 0.5;
    cfg.step_advantage_w = 0.5;
    cfg.mode = GigpoMode::MeanNorm;
    let mut m = Metrics::new();
    let adv = advantages(&[x, y], &[0.5, -0.5], &cfg, &mut m);
    assert_eq!(
        adv,
        vec![
            vec![0.0, 0.625, 0.625, 0.0, 0.0, 0.75, 0.75, 0.75],
            vec![-0.0, -0.625, -0.625, -0.0, -0.0, -0.75, -0.75, -0.75],
        ]
    );
    // two step groups of two
    assert_eq!(m["gigpo/step_group_size/mean"], 2.0);
    assert_eq!(m["gigpo/step_advantages/max"], 0.5);
    // weight 0: GRPO's advantage on every trained token
    cfg.step_advantage_w = 0.0;
    let adv = advantages(
        &[sample(0, vec![1.0, 1.0], vec![(0..1, "a", 1.0)])],
        &[0.25],
        &cfg,
        &mut m,
    );
    assert_eq!(adv, vec![vec![0.25, 0.25]]);
}

#[test]
fn the_defaults_are_the_papers() {
    // verl-agent: verl/trainer/config/ppo_trainer.yaml algorithm.gigpo (step_advantage_w 1.0,
    // mode mean_norm) and its GiGPO example scripts (algorithm.gamma=0.95).
    let g = Config::default_config().algorithm.gigpo;
    assert_eq!(
        (g.gamma, g.step_advantage_w, g.mode),
        (0.95, 1.0, GigpoMode::MeanNorm)
    );
}
