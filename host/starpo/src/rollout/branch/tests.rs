//! Branches on the counting env (`crate::testing::Counter`: `Inc` pays 1 and succeeds at 2,
//! `Stop` ends with 0): their history is their parent's token for token, the env continues from
//! the fork, and GiGPO's step groups over them are the hand-computed ones.

use super::*;
use crate::batch::build_batch;
use crate::config::{GigpoConfig, GigpoMode};
use crate::prompt::{CharTokenizer, PromptConfig};
use crate::rollout::{Generation, rollout};
use crate::testing::{Counter, ScriptedGenerator, trajectory};

fn params() -> RolloutParams {
    RolloutParams {
        prompt: PromptConfig {
            system_prompt: "S".into(),
            prefix: "P".into(),
            enable_think: true,
            response_length: 10,
            max_context_window: -1,
        },
        max_turn: 3,
        max_actions_per_turn: 5,
        max_actions_per_traj: 10,
        action_sep: "||".into(),
        format_penalty: -0.1,
        max_model_len: 100_000,
        generation_batch_size: 8,
        sampling: GenerationParams {
            temperature: 1.0,
            top_p: 1.0,
            max_new_tokens: 10,
            seed: 1,
            stop_at_answer: false,
        },
        tag: "Counter".into(),
        trajectory_wall_budget: None,
        expert_agreement: false,
    }
}

fn answer(action: &str) -> Generation {
    Generation::text(format!(" ok</think><answer>{action}</answer>"))
}

/// Two members of group 0 (seed 1) on a pool of two: both `Inc` in turn 0 (state 1); in turn 1
/// root 0 `Inc`s to success (rewards [1, 1]) and root 1 `Stop`s (rewards [1, 0]). Then two
/// branches of each after one turn, in two waves of two: root 0's answer `Inc` ([1, 1]) and
/// `Stop` ([1, 0]), root 1's `Stop` twice ([1, 0] each). Returns the roots, the branch points,
/// the branches and the prompts as the generator saw them (0-3 the roots', 4-7 the branches').
fn tree() -> (
    Vec<Trajectory>,
    Vec<BranchPoint>,
    Vec<Trajectory>,
    ScriptedGenerator,
) {
    let script = ["Inc", "Inc", "Inc", "Stop", "Inc", "Stop", "Stop", "Stop"];
    let mut g = ScriptedGenerator::new(move |k| answer(script[k]));
    let mut pool = EnvPool::new(vec![Counter::boxed(), Counter::boxed()]);
    let p = params();
    let roots = rollout(&mut pool, &[(0, 1), (0, 1)], &mut g, &p, &mut |_| {}).unwrap();
    let cfg = BranchConfig {
        after_turns: vec![1],
        count: 2,
    };
    let points = branch_points(&roots, &BTreeSet::new(), &cfg);
    let branches = branch(&mut pool, &roots, &points, &mut g, &p, &mut |_| {}).unwrap();
    (roots, points, branches, g)
}

#[test]
fn branches_continue_from_the_fork_with_the_parents_history() {
    let (roots, points, branches, g) = tree();
    assert_eq!(roots[0].turns.len(), 2);
    assert!(roots[0].success && !roots[1].success);
    let at = |root| BranchPoint { root, after: 1 };
    assert_eq!(points, vec![at(0), at(0), at(1), at(1)]);
    assert_eq!(branches.len(), 4);
    for (b, pt) in branches.iter().zip(&points) {
        let parent = &roots[pt.root];
        assert_eq!((b.group, b.seed), (parent.group, parent.seed));
        // the copied turn is the parent's, steps and all
        assert_eq!(b.turns[0], parent.turns[0]);
        assert_eq!(b.turns.len(), 2);
        assert!(b.failure.is_none(), "{:?}", b.end_reason);
    }
    // the env went on from the fork (state 1): Inc reaches 2 and succeeds, Stop ends at 1
    let outcome = |b: &Trajectory| {
        let r = b.turns[1].steps[0].outcome.as_ref().unwrap();
        (r.observation.clone(), b.success, b.score())
    };
    assert_eq!(outcome(&branches[0]), ("2".into(), true, 2.0));
    assert_eq!(outcome(&branches[1]), ("1".into(), false, 1.0));
    assert_eq!(outcome(&branches[2]), ("1".into(), false, 1.0));
    // a branch's first prompt is its parent's turn-1 prompt: the history is the same text
    assert_eq!(g.prompts.len(), 8);
    assert_eq!(g.prompts[4], g.prompts[2]);
    assert_eq!(g.prompts[5], g.prompts[2]);
    assert_eq!(g.prompts[6], g.prompts[3]);
    assert_eq!(g.prompts[7], g.prompts[3]);
}

#[test]
fn branches_share_their_parents_tokens_up_to_the_fork() {
    let (roots, points, branches, _) = tree();
    let p = params();
    let sample = |t: &Trajectory| {
        crate::batch::build_sample(&CharTokenizer, &p.prompt, t, 0, t.score(), false)
            .unwrap()
            .unwrap()
    };
    for (b, pt) in branches.iter().zip(&points) {
        let (child, parent) = (sample(b), sample(&roots[pt.root]));
        // token for token up to the first token of the branch's own answer (turn 1); the
        // position predicting it is where turn 1's span starts
        let fork = child.turns[1].positions.start + 1;
        assert_eq!(parent.turns[1].positions.start + 1, fork);
        assert_eq!(child.input_ids[..fork], parent.input_ids[..fork]);
        assert!(child.input_ids.len() > fork);
    }
}

#[test]
fn only_trajectories_still_running_after_k_turns_branch() {
    // group 0: one turn played (ended within 1), two, three; group 1 is skipped
    let roots = vec![
        trajectory(0, 5, 1),
        trajectory(0, 5, 2),
        trajectory(0, 5, 3),
        trajectory(1, 6, 3),
    ];
    let cfg = BranchConfig {
        after_turns: vec![2, 1, 2],
        count: 1,
    };
    let points = branch_points(&roots, &BTreeSet::from([1]), &cfg);
    let at = |root, after| BranchPoint { root, after };
    assert_eq!(points, vec![at(1, 1), at(2, 1), at(2, 2)]);
    // off: no points
    let off = BranchConfig {
        after_turns: vec![],
        count: 0,
    };
    assert!(branch_points(&roots, &BTreeSet::new(), &off).is_empty());
}

#[test]
fn a_fork_that_diverges_ends_its_branch_as_a_failure() {
    // The record says the first Inc led to state 7: the env (state 1) disagrees, and the branch
    // fails naming the difference instead of playing from a wrong state.
    let (mut roots, _, _, _) = tree();
    let rec = roots[0].turns[0].steps[0].outcome.as_mut().unwrap();
    rec.observation = "7".into();
    roots[0].turns[1].observation = "7".into();
    let mut pool = EnvPool::new(vec![Counter::boxed()]);
    let mut g = ScriptedGenerator::new(|_| answer("Inc"));
    let points = [BranchPoint { root: 0, after: 1 }];
    let b = branch(&mut pool, &roots, &points, &mut g, &params(), &mut |_| {}).unwrap();
    assert!(b[0].failure.is_some());
    let reason = b[0].end_reason.as_deref().unwrap();
    assert!(reason.starts_with("fork failed:"), "{reason}");
    assert!(reason.contains("not deterministic"), "{reason}");
    assert!(g.prompts.is_empty());
}

#[test]
fn gigpo_groups_a_parent_with_its_branches_at_the_fork_state() {
    // The tree above as one batch: roots, then branches, whose copied turn 0 is trained by the
    // parent only (`TrainSample::without_shared_turns`). Turn rewards: root 0 [1, 1], root 1
    // [1, 0]; branches [1, 1], [1, 0], [1, 0], [1, 0] of which only turn 1 is their own.
    // gamma 0.5, mean_norm, episode advantage 0 to read the step level alone:
    // * step group "0" (turn 0): the roots only, G = 1 + 0.5 * 1 = 1.5 and 1 + 0 = 1.0, mean
    //   1.25: A = +0.25, -0.25 (with the copies counted it would be six members);
    // * step group "1" (turn 1, the fork state): the two roots and four branches, G = 1, 0,
    //   1, 0, 0, 0, mean 1/3: A = 2/3 for an Inc, -1/3 for a Stop.
    let (mut trajs, points, branches, _) = tree();
    trajs.extend(branches);
    let mut shared = vec![0, 0];
    shared.extend(points.iter().map(|pt| pt.after));
    let scores: Vec<f64> = trajs.iter().map(|t| t.score()).collect();
    let (samples, _) = build_batch(
        &CharTokenizer,
        &params().prompt,
        &trajs,
        &scores,
        &[0],
        false,
        &shared,
    )
    .unwrap();
    assert_eq!(samples.len(), 6);
    let cfg = GigpoConfig {
        gamma: 0.5,
        step_advantage_w: 1.0,
        mode: GigpoMode::MeanNorm,
    };
    let mut m = crate::metrics::Metrics::new();
    let adv = crate::gigpo::advantages(&samples, &[0.0; 6], &cfg, &mut m);
    let (up, down) = (2.0 / 3.0, -1.0 / 3.0);
    let want: [&[f64]; 6] = [
        &[0.25, up],
        &[-0.25, down],
        &[up],
        &[down],
        &[down],
        &[down],
    ];
    for (i, (s, a)) in samples.iter().zip(&adv).enumerate() {
        assert_eq!(s.turns.len(), want[i].len(), "sample {i}");
        let mut trained = 0;
        for (j, (w, x)) in s.loss_mask.iter().zip(a).enumerate() {
            if *w == 0.0 {
                assert_eq!(*x, 0.0);
                continue;
            }
            trained += 1;
            let t = s.turns.iter().position(|t| t.positions.contains(&j));
            let t = t.unwrap_or_else(|| panic!("sample {i}: trained position {j} in no turn"));
            assert!(
                (f64::from(*x) - want[i][t]).abs() < 1e-6,
                "sample {i} turn {t}: {x}"
            );
        }
        assert!(trained > 0, "sample {i}");
        // a branch trains its own turn only: nothing before the fork
        if i >= 2 {
            let own = s.turns[0].positions.start;
            assert!(s.loss_mask[..own].iter().all(|w| *w == 0.0), "sample {i}");
        }
    }
    assert_eq!(m["gigpo/step_group_size/max"], 6.0);
    assert_eq!(m["gigpo/step_group_size/min"], 2.0);
}
