//! FrozenLake's expert for an agent that sees the board only when a turn begins.
//!
//! A multi-turn rollout shows the model the board, takes up to `k` moves in one answer and shows
//! the board again (RAGEN's `max_actions_per_turn`). Within a turn the model cannot react to a
//! slip, so the closed-loop optimum of [`crate::expert::optimal`] asks for more than any model
//! can do, and demonstrations planned closed loop hold moves that answer slips the model never
//! saw (`scripts/analysis/frozenlake_turn_ceiling.py` computes what imitating them is worth).
//! The plan here is the best an agent can do under that information structure: at each turn's
//! start it commits to a sequence of `k` moves (open loop), and across turns it replans from
//! what it sees (closed loop, backward induction over turns: Puterman, *Markov Decision
//! Processes*, §4.3, with the turn's sequences as the actions).
//!
//! `W(s, l)`, the best probability of reaching the goal from cell `s` at a turn's start with `l`
//! steps left, is the maximum over sequences of `m = min(k, l)` moves of the probability of
//! reaching the goal during them plus `Σ P(s' | s, sequence) W(s', l - m)` over the frozen cells
//! `s'` they end on; `W(s, 0) = 0`. Holes and the goal end the episode. Among sequences worth the
//! same (within [`TIE`]) the plan keeps the one that is also worth most with one step fewer in
//! the episode, then two, … (the tie-break of [`crate::expert::optimal`]): on deterministic ice
//! it walks a shortest path rather than into a wall first.

use std::collections::HashMap;

use crate::expert::{TIE, outcomes};
use crate::map::{Cell, LakeMap};

/// The most moves per turn the planner enumerates (`4^k` sequences per turn start; RAGEN's
/// default `max_actions_per_turn` is 5).
pub const MAX_MOVES_PER_TURN: u32 = 5;

/// The expert's moves for one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnPlan {
    /// Gymnasium directions (0 left, 1 down, 2 right, 3 up), `min(k, steps left)` of them.
    pub actions: Vec<usize>,
    /// The probability of reaching the goal by playing them and then planning every later turn
    /// the same way.
    pub success_probability: f64,
}

/// Where a sequence of moves leaves the player: the probability of having reached the goal,
/// and the probabilities of the frozen cells it may stand on (holes dropped), by cell.
#[derive(Debug, Clone)]
struct Belief {
    won: f64,
    cells: Vec<(usize, f64)>,
}

impl Belief {
    fn at(cell: usize) -> Self {
        Self {
            won: 0.0,
            cells: vec![(cell, 1.0)],
        }
    }
}

/// `W` memoised by `(cell, steps left)`, for one map and slip model: keep one per episode, so
/// that every plan and value of the episode reuses what earlier ones computed.
pub type TurnValues = HashMap<(usize, u32), f64>;

/// The turn planner over one map and slip model (module docs).
pub struct TurnPlanner<'a> {
    map: &'a LakeMap,
    moves_per_turn: u32,
    slippery: bool,
    success_rate: f64,
    values: &'a mut TurnValues,
}

impl<'a> TurnPlanner<'a> {
    /// A planner for turns of `moves_per_turn` (1..=[`MAX_MOVES_PER_TURN`]) moves on `map`,
    /// memoising `W` in `values`, which must have been filled for this map and slip model only.
    pub fn new(
        map: &'a LakeMap,
        moves_per_turn: u32,
        slippery: bool,
        success_rate: f64,
        values: &'a mut TurnValues,
    ) -> Self {
        assert!(
            (1..=MAX_MOVES_PER_TURN).contains(&moves_per_turn),
            "moves per turn {moves_per_turn} outside 1..={MAX_MOVES_PER_TURN}"
        );
        Self {
            map,
            moves_per_turn,
            slippery,
            success_rate,
            values,
        }
    }

    /// The plan for a turn that starts on `player` with `left` steps left in the episode. With
    /// no step left the plan is empty and worth 0.
    pub fn plan(&mut self, player: usize, left: u32) -> TurnPlan {
        let mut best = None;
        self.search(
            &mut vec![Belief::at(player)],
            &mut Vec::new(),
            self.moves_per_turn.min(left),
            left,
            &mut best,
        );
        let (key, actions) = best.expect("the search keeps at least one sequence");
        TurnPlan {
            success_probability: key.first().copied().unwrap_or(0.0),
            actions,
        }
    }

    /// The probability of reaching the goal from `player` with `left` steps left by playing
    /// `actions` (the rest of a turn, open loop) and then planning each later turn by
    /// [`Self::plan`].
    pub fn value_of(&mut self, player: usize, left: u32, actions: &[usize]) -> f64 {
        let n = (actions.len() as u32).min(left);
        let mut b = Belief::at(player);
        for &a in &actions[..n as usize] {
            b = self.advance(&b, a);
        }
        self.continuation(&b, left - n)
    }

    /// The belief after intended direction `a` from `b`.
    fn advance(&self, b: &Belief, a: usize) -> Belief {
        let mut won = b.won;
        let mut cells: Vec<(usize, f64)> = Vec::with_capacity(b.cells.len() * 3);
        for &(s, p) in &b.cells {
            for (d, q) in outcomes(a, self.slippery, self.success_rate) {
                let n = self.map.neighbour(s, d);
                match self.map.cells[n] {
                    Cell::Goal => won += p * q,
                    Cell::Hole => {}
                    Cell::Frozen => cells.push((n, p * q)),
                }
            }
        }
        cells.sort_unstable_by_key(|&(s, _)| s);
        let mut merged: Vec<(usize, f64)> = Vec::with_capacity(cells.len());
        for (s, p) in cells {
            match merged.last_mut() {
                Some((last, q)) if *last == s => *q += p,
                _ => merged.push((s, p)),
            }
        }
        Belief { won, cells: merged }
    }

    /// The value of holding belief `b` at a turn's start with `left` steps left.
    fn continuation(&mut self, b: &Belief, left: u32) -> f64 {
        b.won
            + b.cells
                .iter()
                .map(|&(s, p)| p * self.value(s, left))
                .sum::<f64>()
    }

    /// `W(cell, left)` (module docs).
    fn value(&mut self, cell: usize, left: u32) -> f64 {
        if left == 0 {
            return 0.0;
        }
        if let Some(&v) = self.values.get(&(cell, left)) {
            return v;
        }
        let m = self.moves_per_turn.min(left);
        let v = self.best(&Belief::at(cell), m, left - m);
        self.values.insert((cell, left), v);
        v
    }

    /// The best over the `moves` remaining moves of a turn from `b`, then `after` steps planned
    /// turn by turn.
    fn best(&mut self, b: &Belief, moves: u32, after: u32) -> f64 {
        if moves == 0 || b.cells.is_empty() {
            return self.continuation(b, after);
        }
        (0..4)
            .map(|a| {
                let next = self.advance(b, a);
                self.best(&next, moves - 1, after)
            })
            .fold(0.0, f64::max)
    }

    /// The tie-break key of one turn's sequence from a belief path `path` (`path[n]`: after `n`
    /// moves): its value with `left`, `left - 1`, …, 1 steps left in the episode.
    fn key(&mut self, path: &[Belief], left: u32) -> Vec<f64> {
        let m = (path.len() - 1) as u32;
        (1..=left)
            .rev()
            .map(|l| {
                let n = m.min(l);
                self.continuation(&path[n as usize], l - n)
            })
            .collect()
    }

    /// Enumerate the turn's sequences depth first in direction order, keeping the best key.
    fn search(
        &mut self,
        path: &mut Vec<Belief>,
        actions: &mut Vec<usize>,
        moves: u32,
        left: u32,
        best: &mut Option<(Vec<f64>, Vec<usize>)>,
    ) {
        if actions.len() as u32 == moves {
            let key = self.key(path, left);
            if best.as_ref().is_none_or(|(k, _)| better(&key, k)) {
                *best = Some((key, actions.clone()));
            }
            return;
        }
        for a in 0..4 {
            let next = self.advance(path.last().expect("the path starts at a cell"), a);
            path.push(next);
            actions.push(a);
            self.search(path, actions, moves, left, best);
            actions.pop();
            path.pop();
        }
    }
}

/// Whether key `a` beats `b`: higher at the first entry where they differ by more than [`TIE`].
fn better(a: &[f64], b: &[f64]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x > &(y + TIE) {
            return true;
        }
        if x < &(y - TIE) {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expert::optimal;
    use crate::map::{random_maps, test_map};

    const THIRD: f64 = 1.0 / 3.0;

    /// The plan of a fresh planner (as a new episode's).
    fn turn_plan(
        map: &LakeMap,
        player: usize,
        left: u32,
        k: u32,
        slippery: bool,
        success_rate: f64,
    ) -> TurnPlan {
        TurnPlanner::new(map, k, slippery, success_rate, &mut TurnValues::new()).plan(player, left)
    }

    /// `TurnPlanner::value_of` on a fresh planner.
    fn plan_value(
        map: &LakeMap,
        player: usize,
        left: u32,
        actions: &[usize],
        k: u32,
        slippery: bool,
        success_rate: f64,
    ) -> f64 {
        TurnPlanner::new(map, k, slippery, success_rate, &mut TurnValues::new())
            .value_of(player, left, actions)
    }

    #[test]
    fn one_move_per_turn_is_the_closed_loop_optimum() {
        // With a turn of one move the model sees every state: the plan's value is value
        // iteration's, on 100 random slippery maps and every horizon.
        for (seed, map) in random_maps(100) {
            for left in [1, 4, 10] {
                let plan = turn_plan(&map, map.start, left, 1, true, THIRD);
                let closed = optimal(&map, map.start, left, true, THIRD);
                assert!(
                    (plan.success_probability - closed.success_probability).abs() < 1e-12,
                    "seed {seed}, {left} left: {plan:?} against {closed:?}"
                );
                assert!(closed.actions.contains(&plan.actions[0]), "seed {seed}");
            }
        }
    }

    #[test]
    fn two_blind_moves_next_to_the_goal_by_hand() {
        // Player on 14 (row 3, col 2), goal 15 to its right, no holes (as in `expert::tests`,
        // where two seen moves are worth 4/9). Each move goes the intended way or to either side
        // with 1/3. Right: goal 1/3, else up to 10 or down into the edge (stays on 14), 1/3
        // each; a second Right reaches the goal only from 14 (10 is two moves away): 1/3 + 1/9.
        // Down: goal 1/3 (slip right), else 13 or 14; a second move reaches it only from 14.
        // Up: goal 1/3 (slip right), else 10 or 13, neither one move away: 1/3 in all. Left:
        // nothing first, then only from 14: 1/9.
        let map = test_map("FFFF FFFF FFFF FFFG", 14);
        let value = |actions: &[usize]| plan_value(&map, 14, 2, actions, 2, true, THIRD);
        for (actions, want) in [
            ([2, 2], 4.0 / 9.0),
            ([2, 1], 4.0 / 9.0),
            ([1, 2], 4.0 / 9.0),
            ([1, 1], 4.0 / 9.0),
            ([1, 0], 1.0 / 3.0),
            ([3, 2], 1.0 / 3.0),
            ([0, 2], 1.0 / 9.0),
        ] {
            assert!((value(&actions) - want).abs() < 1e-12, "{actions:?}");
        }
        // Seeing the board after the first move would be worth the same here (4/9): the
        // blind plan loses nothing. Every 4/9 plan is also worth 1/3 with one step left, so
        // direction order decides: Down, Down.
        let plan = turn_plan(&map, 14, 2, 2, true, THIRD);
        assert_eq!(plan.actions, vec![1, 1]);
        assert!((plan.success_probability - 4.0 / 9.0).abs() < 1e-12);
    }

    #[test]
    fn fewer_observations_are_never_worth_more() {
        // The whole kind, on 200 random slippery maps from the start with RAGEN's 10 steps: an
        // agent that sees the board at a superset of the steps another sees it at does at
        // least as well. One move a turn sees every step (the closed-loop optimum bounds every
        // k); two moves a turn see steps 0, 2, 4, 6, 8, a superset of four moves' 0, 4, 8. And a
        // plan replayed through `plan_value` is worth what `turn_plan` says.
        for (seed, map) in random_maps(200) {
            let closed = optimal(&map, map.start, 10, true, THIRD).success_probability;
            let mut w = Vec::new();
            for k in 1..=MAX_MOVES_PER_TURN {
                let plan = turn_plan(&map, map.start, 10, k, true, THIRD);
                let v = plan.success_probability;
                assert!(v <= closed + 1e-12, "seed {seed}, k {k}: {v} > {closed}");
                let replayed = plan_value(&map, map.start, 10, &plan.actions, k, true, THIRD);
                assert!((replayed - v).abs() < 1e-12, "seed {seed}, k {k}");
                w.push(v);
            }
            assert!(w[1] >= w[3] - 1e-12, "seed {seed}: {w:?}");
            assert!(w.iter().all(|&v| v >= 0.0), "seed {seed}");
        }
    }

    #[test]
    fn on_deterministic_ice_the_plan_walks_a_shortest_path() {
        // No slips: seeing the board adds nothing, so every turn length is worth 1 and walks a
        // shortest path; the tie-break keeps it from bumping into a wall first (open board,
        // player 0, goal 15, 6 moves).
        let map = test_map("FFFF FFFF FFFF FFFG", 0);
        for k in 1..=MAX_MOVES_PER_TURN {
            let plan = turn_plan(&map, 0, 10, k, false, 1.0);
            assert_eq!(plan.success_probability, 1.0, "k {k}");
            let mut s = 0;
            for &a in &plan.actions {
                let n = map.neighbour(s, a);
                assert_ne!(n, s, "k {k}: {plan:?} bumps into a wall");
                s = n;
            }
        }
        // The hole under the player of `expert::tests`: the only shortest path starts Left.
        let map = test_map("FFFF FFFF FFFH FFGF", 7);
        assert_eq!(turn_plan(&map, 7, 10, 3, false, 1.0).actions, vec![0, 1, 1]);
    }
}
