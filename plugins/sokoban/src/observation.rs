//! The observation text of a level in the configured [`ObservationFormat`].

use crate::config::{ObservationFormat, SokobanConfig};
use crate::level::{Level, Tile};

/// The observation of `level`: the grid (RAGEN v1), or with `grid_coord` the coordinates block
/// of [`coordinates`] followed by `Grid:` and the grid.
pub fn observe(level: &Level, config: &SokobanConfig) -> String {
    let grid = level.render(config.grid_vocab);
    match config.observation_format {
        ObservationFormat::Grid => grid,
        ObservationFormat::GridCoord => format!("{}\nGrid:\n{grid}", coordinates(level)),
    }
}

/// Zero-indexed `(row, column)` coordinates, one line per kind of cell, kinds without a cell left
/// out (RAGEN-2 `ragen/env/sokoban/utils.py::format_coordinate_render` lists the same kinds, and
/// the walls):
///
/// ```text
/// Board: 6 rows x 6 columns; coordinates are (row, column), zero-indexed from the top left.
/// Targets: (1, 3)
/// Boxes: (2, 2)
/// Player: (3, 2)
/// ```
///
/// `Targets` lists every target, covered or not; `Boxes` the boxes off a target and `Boxes on
/// target` the others; the player is `Player` or `Player on target`.
pub fn coordinates(level: &Level) -> String {
    let at = |pos: usize| format!("({}, {})", pos / level.cols, pos % level.cols);
    let list = |cells: Vec<usize>| cells.into_iter().map(at).collect::<Vec<_>>().join(", ");
    let on_target = |pos: &usize| level.tiles[*pos] == Tile::Target;
    let targets: Vec<usize> = (0..level.tiles.len()).filter(on_target).collect();
    let mut boxes = level.boxes.clone();
    boxes.sort_unstable();
    let (placed, loose): (Vec<usize>, Vec<usize>) = boxes.into_iter().partition(on_target);
    let player = if on_target(&level.player) {
        "Player on target"
    } else {
        "Player"
    };
    let mut lines = vec![format!(
        "Board: {} rows x {} columns; coordinates are (row, column), zero-indexed from the top left.",
        level.rows, level.cols
    )];
    for (label, cells) in [
        ("Targets", targets),
        ("Boxes", loose),
        ("Boxes on target", placed),
        (player, vec![level.player]),
    ] {
        if !cells.is_empty() {
            lines.push(format!("{label}: {}", list(cells)));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridVocab;

    fn level(text: &str) -> Level {
        Level::parse(text, GridVocab::Standard).unwrap()
    }

    #[test]
    fn coordinates_are_row_then_column_from_zero() {
        // Player at row 2, column 1; box at row 1, column 2; target at row 3, column 3.
        let l = level("#####\n#_X_#\n#P__#\n#__O#\n#####");
        assert_eq!(
            coordinates(&l),
            "Board: 5 rows x 5 columns; coordinates are (row, column), zero-indexed from the top \
             left.\nTargets: (3, 3)\nBoxes: (1, 2)\nPlayer: (2, 1)"
        );
    }

    #[test]
    fn boxes_and_player_on_targets_are_named_so() {
        // two targets: one under a box, one under the player; one box off target
        let l = level("######\n#\u{221a}X__#\n#S___#\n######");
        let c = coordinates(&l);
        assert!(c.ends_with(
            "Targets: (1, 1), (2, 1)\nBoxes: (1, 2)\nBoxes on target: (1, 1)\nPlayer on target: (2, 1)"
        ), "{c}");
    }

    #[test]
    fn grid_coord_puts_the_coordinates_before_the_grid() {
        let l = level("#####\n#_X_#\n#P__#\n#__O#\n#####");
        let grid = SokobanConfig::default();
        assert_eq!(observe(&l, &grid), l.render(GridVocab::Standard));
        let coord = SokobanConfig {
            observation_format: ObservationFormat::GridCoord,
            ..SokobanConfig::default()
        };
        let text = observe(&l, &coord);
        let (head, tail) = text.split_once("\nGrid:\n").unwrap();
        assert_eq!(head, coordinates(&l));
        assert_eq!(tail, "#####\n#_X_#\n#P__#\n#__O#\n#####");
    }
}
