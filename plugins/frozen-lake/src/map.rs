//! Random FrozenLake maps (RAGEN's `generate_random_map`, a variant of gymnasium's with a random
//! start and goal).
//!
//! Repeat until valid: every cell is frozen with probability `p`, else a hole; the start and the
//! goal are drawn uniformly (redrawn while equal) and written over the board; the map is valid
//! when a depth-first search from the start over non-hole cells reaches the goal.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// One cell of the lake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// Frozen surface (gymnasium `F`); the start cell (`S`) is frozen too.
    Frozen,
    /// A hole (`H`): the episode ends there with reward 0.
    Hole,
    /// The goal (`G`): the episode ends there with reward 1.
    Goal,
}

/// A square map; positions are `row * size + col`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeMap {
    /// Side length.
    pub size: usize,
    /// `size * size` cells, row-major.
    pub cells: Vec<Cell>,
    /// Start cell (frozen).
    pub start: usize,
    /// Goal cell.
    pub goal: usize,
}

/// Boards drawn before giving up (only reachable with a tiny `p` on a large map).
pub const MAX_MAP_ATTEMPTS: u32 = 100_000;

impl LakeMap {
    /// Draw a map from `rng` (see the module docs); `None` after [`MAX_MAP_ATTEMPTS`] invalid
    /// boards.
    pub fn generate(size: usize, p: f64, rng: &mut ChaCha8Rng) -> Option<LakeMap> {
        let n = size * size;
        for _ in 0..MAX_MAP_ATTEMPTS {
            let mut cells: Vec<Cell> = (0..n)
                .map(|_| {
                    if rng.random::<f64>() < p {
                        Cell::Frozen
                    } else {
                        Cell::Hole
                    }
                })
                .collect();
            let (start, goal) = loop {
                let start = rng.random_range(0..n as u32) as usize;
                let goal = rng.random_range(0..n as u32) as usize;
                if start != goal {
                    break (start, goal);
                }
            };
            cells[start] = Cell::Frozen;
            cells[goal] = Cell::Goal;
            let map = LakeMap {
                size,
                cells,
                start,
                goal,
            };
            if map.goal_reachable() {
                return Some(map);
            }
        }
        None
    }

    /// Whether the goal can be reached from the start without entering a hole (DFS).
    pub fn goal_reachable(&self) -> bool {
        let mut seen = vec![false; self.cells.len()];
        let mut stack = vec![self.start];
        seen[self.start] = true;
        while let Some(pos) = stack.pop() {
            if pos == self.goal {
                return true;
            }
            for dir in 0..4 {
                let next = self.neighbour(pos, dir);
                if !seen[next] && self.cells[next] != Cell::Hole {
                    seen[next] = true;
                    stack.push(next);
                }
            }
        }
        false
    }

    /// The map with the player at `player` as text (RAGEN's text render; the start shows as
    /// empty): `P` the player, `_` frozen, `O` a hole, `G` the goal, and `X` / `√` the player in a
    /// hole / on the goal.
    pub fn render(&self, player: usize) -> String {
        let mut out = String::with_capacity(self.size * (self.size + 1) * 2);
        for (pos, cell) in self.cells.iter().enumerate() {
            if pos > 0 && pos % self.size == 0 {
                out.push('\n');
            }
            out.push_str(match (pos == player, cell) {
                (true, Cell::Hole) => "X",
                (true, Cell::Goal) => "\u{221a}",
                (true, Cell::Frozen) => "P",
                (false, Cell::Hole) => "O",
                (false, Cell::Goal) => "G",
                (false, Cell::Frozen) => "_",
            });
        }
        out
    }

    /// The cell reached from `pos` moving in gymnasium direction `dir` (0 left, 1 down, 2 right,
    /// 3 up); moving into the edge leaves the position unchanged.
    pub fn neighbour(&self, pos: usize, dir: usize) -> usize {
        let (r, c) = (pos / self.size, pos % self.size);
        let (r, c) = match dir {
            0 => (r, c.saturating_sub(1)),
            1 => ((r + 1).min(self.size - 1), c),
            2 => (r, (c + 1).min(self.size - 1)),
            _ => (r.saturating_sub(1), c),
        };
        r * self.size + c
    }
}

/// A 4×4 map from its cells as letters, row-major (`H` hole, `G` goal, anything else frozen;
/// whitespace ignored), starting at cell `start`: the fixed boards of the tests.
#[cfg(test)]
pub(crate) fn test_map(cells: &str, start: usize) -> LakeMap {
    let cells: Vec<Cell> = cells
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| match c {
            'H' => Cell::Hole,
            'G' => Cell::Goal,
            _ => Cell::Frozen,
        })
        .collect();
    let goal = cells.iter().position(|&c| c == Cell::Goal).unwrap();
    LakeMap {
        size: 4,
        cells,
        start,
        goal,
    }
}

/// RAGEN's maps (4×4, P(frozen) = 0.8) for seeds `0..n`, as `reset` draws them: the random
/// boards of the tests.
#[cfg(test)]
pub(crate) fn random_maps(n: u64) -> impl Iterator<Item = (u64, LakeMap)> {
    use rand::SeedableRng;
    (0..n).map(|seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (seed, LakeMap::generate(4, 0.8, &mut rng).unwrap())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_for_1000_seeds_are_reachable_with_distinct_start_and_goal() {
        let mut holes = 0usize;
        for (seed, map) in random_maps(1000) {
            assert_ne!(map.start, map.goal, "seed {seed}");
            assert_eq!(map.cells[map.start], Cell::Frozen, "seed {seed}");
            assert_eq!(
                map.cells.iter().filter(|&&c| c == Cell::Goal).count(),
                1,
                "seed {seed}"
            );
            assert!(map.goal_reachable(), "seed {seed}");
            holes += map.cells.iter().filter(|&&c| c == Cell::Hole).count();
        }
        // Each of the 14 cells that are neither start nor goal is a hole with probability 0.2
        // before the reachability filter, which can only lower the rate: 14 000 Bernoulli(0.2)
        // draws have mean 2800 and sd 47; allow the filter to pull the mean down but not up.
        assert!(holes < 2800 + 5 * 48, "{holes} holes");
        assert!(
            holes > 1500,
            "{holes} holes: far fewer than P(hole) = 0.2 gives"
        );
    }

    #[test]
    fn edges_keep_the_player_in_place() {
        let map = LakeMap {
            size: 4,
            cells: vec![Cell::Frozen; 16],
            start: 0,
            goal: 15,
        };
        assert_eq!(map.neighbour(0, 0), 0);
        assert_eq!(map.neighbour(0, 3), 0);
        assert_eq!(map.neighbour(0, 1), 4);
        assert_eq!(map.neighbour(0, 2), 1);
        assert_eq!(map.neighbour(15, 1), 15);
        assert_eq!(map.neighbour(15, 2), 15);
    }

    #[test]
    fn a_wall_of_holes_makes_the_goal_unreachable() {
        use Cell::{Frozen as F, Goal as G, Hole as H};
        let cells = vec![F, H, F, F, H, H, F, F, F, F, F, F, F, F, F, G];
        let map = LakeMap {
            size: 4,
            cells,
            start: 0,
            goal: 15,
        };
        assert!(!map.goal_reachable());
    }
}
