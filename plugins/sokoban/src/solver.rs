//! Breadth-first Sokoban solver used by the tests to prove generated levels solvable, and an
//! exhaustive enumeration of every level a small room admits (the ceiling on distinct levels).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::config::GridVocab;
use crate::level::{Direction, Level, Tile};

/// Player cell and sorted box cells.
type StateKey = (usize, Vec<usize>);

/// Shortest action sequence that solves `level`, exploring at most `max_states` states;
/// `None` if unsolvable within that budget.
pub(crate) fn shortest_solution(level: &Level, max_states: usize) -> Option<Vec<Direction>> {
    let key = |l: &Level| {
        let mut boxes = l.boxes.clone();
        boxes.sort_unstable();
        (l.player, boxes)
    };
    let mut parent: HashMap<StateKey, Option<(StateKey, Direction)>> = HashMap::new();
    parent.insert(key(level), None);
    let mut queue = VecDeque::from([level.clone()]);
    while let Some(current) = queue.pop_front() {
        if current.is_solved() {
            let mut path = Vec::new();
            let mut k = key(&current);
            while let Some(Some((prev, dir))) = parent.get(&k) {
                path.push(*dir);
                k = prev.clone();
            }
            path.reverse();
            return Some(path);
        }
        for dir in Direction::ALL {
            let mut next = current.clone();
            if !next.apply(dir).moved {
                continue;
            }
            let k = key(&next);
            if !parent.contains_key(&k) {
                if parent.len() >= max_states {
                    return None;
                }
                parent.insert(k, Some((key(&current), dir)));
                queue.push_back(next);
            }
        }
    }
    None
}

/// Every level the generator could possibly emit for a `rows x cols` room with `num_boxes`
/// boxes, rendered with the standard vocabulary: a connected floor inside the border walls
/// (the random walk stamps connected masks, gym-sokoban `room_topology_generation`),
/// `num_boxes` targets, every box off its target (`reverse_playing` keeps only states with all
/// targets uncovered), the player on any free cell, and solvable. Solvable states are found
/// exactly, as those reachable by reverse moves (a step, or a step that pulls the box behind the
/// player) from a solved state with the player anywhere free.
///
/// Exhaustive over floor subsets, so only for rooms with at most 16 interior cells.
pub(crate) fn all_valid_levels(rows: usize, cols: usize, num_boxes: usize) -> HashSet<String> {
    let (inner_rows, inner_cols) = (rows - 2, cols - 2);
    let inner = inner_rows * inner_cols;
    assert!(
        inner <= 16,
        "exhaustive enumeration is for small rooms only"
    );
    let cell = |i: usize| (i / inner_cols + 1) * cols + i % inner_cols + 1;
    let mut levels = HashSet::new();
    for floor_mask in 1u32..(1 << inner) {
        let floor: Vec<usize> = (0..inner)
            .filter(|&i| floor_mask >> i & 1 == 1)
            .map(cell)
            .collect();
        if floor.len() < 2 * num_boxes + 1 {
            continue;
        }
        let mut tiles = vec![Tile::Wall; rows * cols];
        for &p in &floor {
            tiles[p] = Tile::Floor;
        }
        let room = Level {
            rows,
            cols,
            tiles,
            player: floor[0],
            boxes: Vec::new(),
        };
        if !is_connected(&room, &floor) {
            continue;
        }
        for targets in combinations(&floor, num_boxes) {
            let mut room = room.clone();
            for &t in &targets {
                room.tiles[t] = Tile::Target;
            }
            for (player, boxes) in reverse_reachable(&room, &floor, &targets) {
                if boxes.iter().all(|&b| room.tiles[b] != Tile::Target) {
                    let level = Level {
                        player,
                        boxes,
                        ..room.clone()
                    };
                    levels.insert(level.render(GridVocab::Standard));
                }
            }
        }
    }
    levels
}

fn is_connected(room: &Level, floor: &[usize]) -> bool {
    let mut seen = HashSet::from([floor[0]]);
    let mut stack = vec![floor[0]];
    while let Some(p) = stack.pop() {
        for dir in Direction::ALL {
            if let Some(q) = room.neighbour(p, dir)
                && room.tiles[q] != Tile::Wall
                && seen.insert(q)
            {
                stack.push(q);
            }
        }
    }
    seen.len() == floor.len()
}

/// States (player, sorted boxes) from which `room` can be solved.
fn reverse_reachable(room: &Level, floor: &[usize], targets: &[usize]) -> HashSet<StateKey> {
    let mut seen: HashSet<StateKey> = floor
        .iter()
        .filter(|p| !targets.contains(p))
        .map(|&p| (p, targets.to_vec()))
        .collect();
    let mut queue: VecDeque<StateKey> = seen.iter().cloned().collect();
    while let Some((player, boxes)) = queue.pop_front() {
        for dir in Direction::ALL {
            let Some(next) = room.neighbour(player, dir) else {
                continue;
            };
            if room.tiles[next] == Tile::Wall || boxes.contains(&next) {
                continue;
            }
            let mut successors = vec![(next, boxes.clone())];
            let behind = room.neighbour(player, dir.opposite());
            if let Some(i) = behind.and_then(|b| boxes.iter().position(|&x| x == b)) {
                let mut pulled = boxes.clone();
                pulled[i] = player;
                pulled.sort_unstable();
                successors.push((next, pulled));
            }
            for state in successors {
                if seen.insert(state.clone()) {
                    queue.push_back(state);
                }
            }
        }
    }
    seen
}

fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    (0..items.len())
        .flat_map(|i| {
            combinations(&items[i + 1..], k - 1)
                .into_iter()
                .map(move |mut rest| {
                    rest.insert(0, items[i]);
                    rest
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridVocab;

    #[test]
    fn finds_the_shortest_push_sequence() {
        let level = Level::parse("######\n#P_XO#\n######", GridVocab::Standard).unwrap();
        assert_eq!(
            shortest_solution(&level, 1000),
            Some(vec![Direction::Right, Direction::Right])
        );
    }

    #[test]
    fn enumerates_every_level_of_a_two_row_room() {
        // 4x5 room, interior cells a0 a1 a2 / b0 b1 b2 (all but a1 and b1 are corners).
        // Hand count, full floor: a box off its target cannot stand in a corner, so it is on a1
        // (or b1); it can only be pushed sideways, so its target is a0 or a2 (b0 or b2); the
        // five other cells stay connected around it, so the player may be on any of them:
        // 2 box rows x 2 targets x 5 player cells = 20 levels.
        // Top row only (a0 a1 a2): the box on a1, the player on the far side of the target:
        // 2 levels.
        let levels = all_valid_levels(4, 5, 1);
        let interior = |text: &str| -> Vec<String> {
            text.lines()
                .skip(1)
                .take(2)
                .map(|row| row[1..4].to_string())
                .collect()
        };
        let full = levels
            .iter()
            .filter(|t| interior(t).iter().all(|row| !row.contains('#')))
            .count();
        assert_eq!(full, 20);
        let top_row_only = levels
            .iter()
            .filter(|t| {
                let rows = interior(t);
                !rows[0].contains('#') && rows[1] == "###"
            })
            .count();
        assert_eq!(top_row_only, 2);
        for text in &levels {
            let level = Level::parse(text, GridVocab::Standard).unwrap();
            assert!(!level.is_solved(), "{text}");
            assert!(shortest_solution(&level, 10_000).is_some(), "{text}");
        }
        // A 4x4 room (all corners) admits none.
        assert!(all_valid_levels(4, 4, 1).is_empty());
    }

    #[test]
    fn reports_a_dead_corner_box_as_unsolvable() {
        let level = Level::parse("#####\n#X__#\n#_P_#\n#__O#\n#####", GridVocab::Standard).unwrap();
        assert_eq!(shortest_solution(&level, 100_000), None);
    }
}
