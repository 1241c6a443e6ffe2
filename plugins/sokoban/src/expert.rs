//! The Sokoban expert: the first moves of the shortest plans from the current state, found by one
//! breadth-first search over (player, boxes) states that carries, for every state, the set of
//! first moves that reach it on a shortest path. The BFS solver of RAGEN's SFT data (RAGEN v1,
//! arXiv 2504.20073, appendix C) plans the same way; its plan's first move is one of these.

use std::collections::{HashMap, VecDeque};

use crate::level::{Direction, Level};

/// Most states one search explores (a 6x6 room with one box has at most a few hundred; an 8x8
/// room with two boxes a few tens of thousands).
pub const EXPERT_MAX_STATES: usize = 500_000;

/// The first moves of every shortest plan that solves `level`, in [`Direction::ALL`] order, and
/// the plan's length; `None` when no plan exists within [`EXPERT_MAX_STATES`] states (a box
/// stuck in a corner, or a level too large to search). A solved level has plan length 0 and no
/// moves.
pub fn shortest_first_moves(level: &Level) -> Option<(u32, Vec<Direction>)> {
    if level.is_solved() {
        return Some((0, Vec::new()));
    }
    let key = |l: &Level| {
        let mut boxes = l.boxes.clone();
        boxes.sort_unstable();
        (l.player, boxes)
    };
    // state -> (depth, bit set of first moves over Direction::ALL)
    let mut seen: HashMap<(usize, Vec<usize>), (u32, u8)> = HashMap::new();
    seen.insert(key(level), (0, 0));
    let mut queue = VecDeque::from([(level.clone(), 0u32, 0u8)]);
    let mut found: Option<(u32, u8)> = None;
    while let Some((state, depth, first)) = queue.pop_front() {
        if found.is_some_and(|(d, _)| depth >= d) {
            break;
        }
        // The entry may have gained first moves after it was queued.
        let first = seen.get(&key(&state)).map_or(first, |e| e.1);
        for (i, dir) in Direction::ALL.into_iter().enumerate() {
            let mut next = state.clone();
            if !next.apply(dir).moved {
                continue;
            }
            let moves = if depth == 0 { 1 << i } else { first };
            if next.is_solved() {
                let (d, m) = found.get_or_insert((depth + 1, 0));
                if *d == depth + 1 {
                    *m |= moves;
                }
                continue;
            }
            match seen.get_mut(&key(&next)) {
                Some((d, m)) if *d == depth + 1 => *m |= moves,
                Some(_) => {}
                None => {
                    if seen.len() >= EXPERT_MAX_STATES {
                        return None;
                    }
                    seen.insert(key(&next), (depth + 1, moves));
                    queue.push_back((next, depth + 1, moves));
                }
            }
        }
    }
    let (length, mask) = found?;
    let moves = Direction::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| mask >> i & 1 == 1)
        .map(|(_, d)| d)
        .collect();
    Some((length, moves))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridVocab;
    use crate::solver::shortest_solution;

    fn level(text: &str) -> Level {
        Level::parse(text, GridVocab::Standard).unwrap()
    }

    #[test]
    fn a_corridor_has_one_first_move() {
        let l = level("######\n#P_XO#\n######");
        assert_eq!(shortest_first_moves(&l), Some((2, vec![Direction::Right])));
    }

    #[test]
    fn every_first_move_of_a_shortest_plan_is_listed() {
        // The box (2,2) goes Right onto the target (2,3) when pushed from (2,1): Down, then the
        // push. Right first leads nowhere shorter (Down from (1,2) pushes the box into a wall).
        let l = level("#######\n#P____#\n#_XO__#\n#######");
        assert_eq!(shortest_first_moves(&l), Some((2, vec![Direction::Down])));
        assert_eq!(shortest_solution(&l, 10_000).unwrap().len(), 2);
        //   #####
        //   #P__#
        //   #___#
        //   #_X_#
        //   #_O_#  the box (3,2) goes Down onto (4,2): the player reaches (2,2) by Down-Right or
        //   #####  Right-Down, then pushes: length 3, first moves Down and Right.
        let l = level("#####\n#P__#\n#___#\n#_X_#\n#_O_#\n#####");
        assert_eq!(
            shortest_first_moves(&l),
            Some((3, vec![Direction::Down, Direction::Right]))
        );
    }

    #[test]
    fn a_stuck_box_has_no_plan_and_a_solved_level_no_moves() {
        let stuck = level("#####\n#X__#\n#_P_#\n#__O#\n#####");
        assert_eq!(shortest_first_moves(&stuck), None);
        let mut solved = level("######\n#P_XO#\n######");
        solved.apply(Direction::Right);
        solved.apply(Direction::Right);
        assert_eq!(shortest_first_moves(&solved), Some((0, Vec::new())));
    }

    #[test]
    fn agrees_with_the_test_solver_on_generated_levels() {
        for seed in 0..40 {
            let g = crate::generator::generate(&crate::SokobanConfig::default(), seed).unwrap();
            let plan = shortest_solution(&g.level, 100_000).unwrap();
            let (len, moves) = shortest_first_moves(&g.level).unwrap();
            assert_eq!(len as usize, plan.len(), "seed {seed}");
            assert!(
                moves.contains(&plan[0]),
                "seed {seed}: {moves:?} vs {plan:?}"
            );
        }
    }
}
