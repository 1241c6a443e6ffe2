//! Breadth-first Sokoban solver used by the tests to prove generated levels solvable.

use std::collections::{HashMap, VecDeque};

use crate::level::{Direction, Level};

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
    fn reports_a_dead_corner_box_as_unsolvable() {
        let level = Level::parse("#####\n#X__#\n#_P_#\n#__O#\n#####", GridVocab::Standard).unwrap();
        assert_eq!(shortest_solution(&level, 100_000), None);
    }
}
