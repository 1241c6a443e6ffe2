//! The observation text of a map and player cell in the configured [`ObservationFormat`].

use crate::config::{FrozenLakeConfig, ObservationFormat};
use crate::map::{Cell, LakeMap};

/// The observation: the grid (RAGEN v1), or with `grid_coord` the block of [`coordinates`]
/// followed by `Grid:` and the grid.
pub fn observe(map: &LakeMap, player: usize, config: &FrozenLakeConfig) -> String {
    let grid = map.render(player);
    match config.observation_format {
        ObservationFormat::Grid => grid,
        ObservationFormat::GridCoord => format!("{}\nGrid:\n{grid}", coordinates(map, player)),
    }
}

/// Zero-indexed `(row, column)` coordinates of the player, the goal and the holes (RAGEN-2
/// `ragen/env/frozen_lake/utils.py::format_coordinate_render` lists the same kinds):
///
/// ```text
/// Board: 4 rows x 4 columns; coordinates are (row, column), zero-indexed from the top left.
/// Player: (0, 1)
/// Goal: (3, 3)
/// Holes: (1, 1), (2, 3)
/// ```
///
/// A map without holes has no `Holes` line.
pub fn coordinates(map: &LakeMap, player: usize) -> String {
    let at = |pos: usize| format!("({}, {})", pos / map.size, pos % map.size);
    let holes: Vec<String> = (0..map.cells.len())
        .filter(|&p| map.cells[p] == Cell::Hole)
        .map(at)
        .collect();
    let mut lines = vec![
        format!(
            "Board: {0} rows x {0} columns; coordinates are (row, column), zero-indexed from the top left.",
            map.size
        ),
        format!("Player: {}", at(player)),
        format!("Goal: {}", at(map.goal)),
    ];
    if !holes.is_empty() {
        lines.push(format!("Holes: {}", holes.join(", ")));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(cells: &str, start: usize) -> LakeMap {
        crate::map::test_map(cells, start)
    }

    #[test]
    fn coordinates_are_row_then_column_from_zero() {
        // player at cell 1 = (0, 1); holes at 5 = (1, 1) and 11 = (2, 3); goal at 15 = (3, 3)
        let m = map("FFFF FHFF FFFH FFFG", 1);
        assert_eq!(
            coordinates(&m, 1),
            "Board: 4 rows x 4 columns; coordinates are (row, column), zero-indexed from the top \
             left.\nPlayer: (0, 1)\nGoal: (3, 3)\nHoles: (1, 1), (2, 3)"
        );
        let open = map("FFFF FFFF FGFF FFFF", 0);
        assert!(coordinates(&open, 0).ends_with("Player: (0, 0)\nGoal: (2, 1)"));
    }

    #[test]
    fn grid_coord_puts_the_coordinates_before_the_grid() {
        let m = map("FFFF FHFF FFFH FFFG", 1);
        let grid = FrozenLakeConfig::default();
        assert_eq!(observe(&m, 1, &grid), "_P__\n_O__\n___O\n___G");
        let coord = FrozenLakeConfig {
            observation_format: ObservationFormat::GridCoord,
            ..FrozenLakeConfig::default()
        };
        assert_eq!(
            observe(&m, 1, &coord),
            format!("{}\nGrid:\n_P__\n_O__\n___O\n___G", coordinates(&m, 1))
        );
    }
}
