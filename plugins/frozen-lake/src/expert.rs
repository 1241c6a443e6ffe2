//! FrozenLake's experts over the slip model of [`crate::env`] (gymnasium's `FrozenLakeEnv`
//! transition table `P[s][a]`: the intended direction with probability `success_rate`, each
//! perpendicular one with `(1 - success_rate) / 2`, or the intended one surely when not
//! slippery).
//!
//! - [`optimal`]: finite-horizon value iteration (Sutton & Barto, *Reinforcement Learning*,
//!   2nd ed., §4.4): `V_0 = 0` off the goal, `V_k(s) = max_a Σ P(s'|s,a) v_{k-1}(s')` with
//!   `v(goal) = 1`, `v(hole) = 0`, so `V_k(s)` is the highest probability of reaching the goal
//!   from `s` within `k` steps. Among the actions that reach this maximum for the steps left,
//!   the expert keeps those that also do best with one step fewer, then two, and so on (a
//!   lexicographic tie-break over `Q_H, Q_{H-1}, …, Q_1`): on deterministic ice every move that
//!   leaves the goal within reach is worth 1, and without the tie-break the first of them (Left,
//!   into a wall) was recommended until the last moment; with it the expert walks a shortest
//!   path, and its success probability is unchanged.
//! - [`greedy`]: the next move of a shortest hole-free path to the goal (breadth-first search from
//!   the goal), ignoring slips; its success probability is the same recursion with the greedy
//!   action instead of the max (policy evaluation, §4.1).

use crate::map::{Cell, LakeMap};

/// Values closer than this are equally good.
pub(crate) const TIE: f64 = 1e-12;

/// What an expert recommends from one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The recommended gymnasium directions (0 left, 1 down, 2 right, 3 up), equally good,
    /// in that order.
    pub actions: Vec<usize>,
    /// The probability of reaching the goal within the horizon by following the expert.
    pub success_probability: f64,
}

/// The slip model: `(direction taken, probability)` for intended direction `a`.
pub(crate) fn outcomes(a: usize, slippery: bool, success_rate: f64) -> Vec<(usize, f64)> {
    if !slippery {
        return vec![(a, 1.0)];
    }
    let side = (1.0 - success_rate) / 2.0;
    vec![((a + 3) % 4, side), (a, success_rate), ((a + 1) % 4, side)]
}

/// The value of arriving in `cell` with `next` the values one step later.
fn arrive(map: &LakeMap, cell: usize, next: &[f64]) -> f64 {
    match map.cells[cell] {
        Cell::Goal => 1.0,
        Cell::Hole => 0.0,
        Cell::Frozen => next[cell],
    }
}

/// `Σ P(s'|s,a) v(s')` for every cell `s` and direction `a`, given `v` one step later.
fn q_values(map: &LakeMap, v: &[f64], slippery: bool, success_rate: f64) -> Vec<[f64; 4]> {
    (0..map.cells.len())
        .map(|s| {
            let mut q = [0.0; 4];
            for (a, qa) in q.iter_mut().enumerate() {
                *qa = outcomes(a, slippery, success_rate)
                    .into_iter()
                    .map(|(d, p)| p * arrive(map, map.neighbour(s, d), v))
                    .sum();
            }
            q
        })
        .collect()
}

/// The optimal choice at `player` with `horizon` steps left (value iteration; see the module
/// docs). With no step left, or the goal out of reach, every action has value 0 and all four
/// are listed.
pub fn optimal(
    map: &LakeMap,
    player: usize,
    horizon: u32,
    slippery: bool,
    success_rate: f64,
) -> Choice {
    let mut v = vec![0.0; map.cells.len()];
    // `at_player[k - 1]`: the player's action values with `k` steps left.
    let mut at_player = Vec::with_capacity(horizon as usize);
    for _ in 0..horizon {
        let q = q_values(map, &v, slippery, success_rate);
        v = q
            .iter()
            .map(|qs| qs.iter().copied().fold(0.0, f64::max))
            .collect();
        at_player.push(q[player]);
    }
    let mut actions: Vec<usize> = (0..4).collect();
    // The steps left first, then one step fewer, …: keep the best of the actions still tied.
    for q in at_player.iter().rev() {
        let best = actions.iter().map(|&a| q[a]).fold(0.0, f64::max);
        actions.retain(|&a| q[a] >= best - TIE);
    }
    Choice {
        actions,
        success_probability: v[player],
    }
}

/// Steps from every cell to the goal over non-hole cells (`None`: no hole-free path).
fn goal_distances(map: &LakeMap) -> Vec<Option<u32>> {
    let mut dist = vec![None; map.cells.len()];
    dist[map.goal] = Some(0);
    let mut queue = std::collections::VecDeque::from([map.goal]);
    while let Some(s) = queue.pop_front() {
        let d = dist[s].unwrap_or(0);
        for dir in 0..4 {
            let n = map.neighbour(s, dir);
            if dist[n].is_none() && map.cells[n] != Cell::Hole {
                dist[n] = Some(d + 1);
                queue.push_back(n);
            }
        }
    }
    dist
}

/// The greedy directions at `s`: those whose move lands one step closer to the goal.
fn greedy_actions(map: &LakeMap, dist: &[Option<u32>], s: usize) -> Vec<usize> {
    let Some(d) = dist[s].filter(|&d| d > 0) else {
        return Vec::new();
    };
    (0..4)
        .filter(|&a| dist[map.neighbour(s, a)] == Some(d - 1))
        .collect()
}

/// The greedy choice at `player` and the probability that following it (the first listed
/// action at every cell) reaches the goal within `horizon` steps. With no hole-free path there
/// is no greedy move.
pub fn greedy(
    map: &LakeMap,
    player: usize,
    horizon: u32,
    slippery: bool,
    success_rate: f64,
) -> Choice {
    let dist = goal_distances(map);
    let policy: Vec<Option<usize>> = (0..map.cells.len())
        .map(|s| greedy_actions(map, &dist, s).first().copied())
        .collect();
    let mut v = vec![0.0; map.cells.len()];
    for _ in 0..horizon {
        let q = q_values(map, &v, slippery, success_rate);
        v = (0..map.cells.len())
            .map(|s| policy[s].map_or(0.0, |a| q[s][a]))
            .collect();
    }
    Choice {
        actions: greedy_actions(map, &dist, player),
        success_probability: v[player],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::{random_maps, test_map};

    const THIRD: f64 = 1.0 / 3.0;

    #[test]
    fn next_to_the_goal_on_slippery_ice_by_hand() {
        // Player on 14 (row 3, col 2), goal 15 to its right, no holes. One step: Right reaches
        // the goal with 1/3 (else up to 10 or down into the edge, staying); Down and Up slip
        // right with 1/3; Left cannot. Two steps: Right and Down keep 1/3 of staying on 14,
        // worth another 1/3, while Up's other outcomes (10, 13) are 2 moves from the goal:
        // V_2(14) = 1/3 + 1/3 * 1/3 = 4/9 by Down or Right; Up 1/3; Left 1/9.
        let map = test_map("FFFF FFFF FFFF FFFG", 14);
        let one = optimal(&map, 14, 1, true, THIRD);
        assert_eq!(one.actions, vec![1, 2, 3]);
        assert!((one.success_probability - THIRD).abs() < 1e-12);
        let two = optimal(&map, 14, 2, true, THIRD);
        assert_eq!(two.actions, vec![1, 2]);
        assert!(
            (two.success_probability - 4.0 / 9.0).abs() < 1e-12,
            "{two:?}"
        );
        // No step left: nothing can be reached.
        assert_eq!(optimal(&map, 14, 0, true, THIRD).success_probability, 0.0);
    }

    #[test]
    fn a_hole_between_player_and_goal_is_walked_round() {
        // Player on 13 (row 3, col 1), goal on 15, hole on 14 between them: the shortest path
        // goes round, 13 -> 9 -> 10 -> 11 -> 15, first move Up. Deterministic ice: both experts
        // reach the goal surely in 4 steps, never in 3.
        let map = test_map("FFFF FFFF FFFF FFHG", 13);
        for expert in [optimal, greedy] {
            assert_eq!(expert(&map, 13, 3, false, 1.0).success_probability, 0.0);
            let c = expert(&map, 13, 4, false, 1.0);
            assert_eq!((c.actions.clone(), c.success_probability), (vec![3], 1.0));
        }
        // Slippery, from 11 (right above the goal, hole 14 to the goal's left): Down reaches the
        // goal with 1/3; Left and Right slip down onto it with 1/3; Up cannot. One step: 1/3.
        let one = optimal(&map, 11, 1, true, THIRD);
        assert_eq!(one.actions, vec![0, 1, 2]);
        assert!((one.success_probability - THIRD).abs() < 1e-12);
        // Greedy takes Down (the shortest path) and is worth 1/3 too.
        let g = greedy(&map, 11, 1, true, THIRD);
        assert_eq!(g.actions, vec![1]);
        assert!((g.success_probability - THIRD).abs() < 1e-12);
    }

    #[test]
    fn on_deterministic_ice_the_optimum_walks_a_shortest_path() {
        // Open board, player on 0 (top left), goal on 15: every first move keeps the goal within
        // 10 steps (Left and Up bump into the edge and stay), so all four are worth 1 with 10
        // steps left; only Down and Right are worth 1 with 6 left, the shortest path's length.
        let map = test_map("FFFF FFFF FFFF FFFG", 0);
        let c = optimal(&map, 0, 10, false, 1.0);
        assert_eq!((c.actions, c.success_probability), (vec![1, 2], 1.0));
        // Player on 7 (row 1, col 3), goal on 14 (row 3, col 2), a hole on 11 right under the
        // player: Down falls in; Right bumps into the edge and Up leaves the goal 4 and 5 steps
        // away, within reach but not with 3 steps left; Left starts the only shortest path,
        // 7 -> 6 -> 10 -> 14.
        let map = test_map("FFFF FFFF FFFH FFGF", 7);
        assert_eq!(optimal(&map, 7, 10, false, 1.0).actions, vec![0]);
    }

    #[test]
    fn following_the_deterministic_optimum_takes_exactly_the_shortest_path_length() {
        // The whole kind: on 200 random maps, from the start, the optimum's first listed action
        // followed step by step reaches the goal in the breadth-first distance, never more.
        for (seed, map) in random_maps(200) {
            let shortest = goal_distances(&map)[map.start].expect("the goal is reachable");
            let (mut s, mut steps) = (map.start, 0u32);
            while s != map.goal {
                let c = optimal(&map, s, 10 - steps, false, 1.0);
                assert_eq!(c.success_probability, 1.0, "seed {seed}");
                s = map.neighbour(s, c.actions[0]);
                steps += 1;
                assert!(steps <= shortest, "seed {seed}: more than {shortest} steps");
            }
            assert_eq!(steps, shortest, "seed {seed}");
        }
    }

    #[test]
    fn the_optimum_is_never_below_greedy() {
        for (seed, map) in random_maps(200) {
            let o = optimal(&map, map.start, 10, true, THIRD).success_probability;
            let g = greedy(&map, map.start, 10, true, THIRD).success_probability;
            assert!(o >= g - 1e-12 && o <= 1.0, "seed {seed}: {o} < {g}");
        }
    }
}
