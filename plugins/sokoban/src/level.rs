//! A Sokoban level: the fixed room (walls, floor, targets) plus the movable player and boxes,
//! its text rendering and the push/move rules of gym-sokoban's `step`.

use crate::config::GridVocab;

/// A fixed cell of the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tile {
    /// Impassable.
    Wall,
    /// Empty floor.
    Floor,
    /// Floor on which a box must end.
    Target,
}

/// One of the four moves (RAGEN's actions 1-4, gym-sokoban's "push up/down/left/right").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Row - 1.
    Up,
    /// Row + 1.
    Down,
    /// Column - 1.
    Left,
    /// Column + 1.
    Right,
}

impl Direction {
    /// All four, in RAGEN's action order (`action_lookup` 1..=4) and gym-sokoban's
    /// `CHANGE_COORDINATES` order.
    pub const ALL: [Direction; 4] = [
        Direction::Up,
        Direction::Down,
        Direction::Left,
        Direction::Right,
    ];

    /// The action name the model writes.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "Up",
            Direction::Down => "Down",
            Direction::Left => "Left",
            Direction::Right => "Right",
        }
    }

    /// Parse an action name, ignoring case and surrounding whitespace.
    pub fn parse(action: &str) -> Option<Direction> {
        let action = action.trim();
        Direction::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(action))
    }

    /// The reverse direction.
    pub fn opposite(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
            Direction::Left => Direction::Right,
            Direction::Right => Direction::Left,
        }
    }

    /// `(row, column)` change.
    pub fn delta(self) -> (isize, isize) {
        match self {
            Direction::Up => (-1, 0),
            Direction::Down => (1, 0),
            Direction::Left => (0, -1),
            Direction::Right => (0, 1),
        }
    }
}

/// What one move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveOutcome {
    /// The player changed cell (RAGEN `action_is_effective`).
    pub moved: bool,
    /// A box was pushed.
    pub pushed: bool,
}

/// A level: `rows x cols` cells in row-major order; positions are cell indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// Number of rows (RAGEN `dim_x`).
    pub rows: usize,
    /// Number of columns (RAGEN `dim_y`).
    pub cols: usize,
    /// The fixed room, `rows * cols` tiles.
    pub tiles: Vec<Tile>,
    /// Player cell.
    pub player: usize,
    /// Box cells (no two equal; never a wall).
    pub boxes: Vec<usize>,
}

impl Level {
    /// The cell next to `pos` in direction `dir`, if inside the room.
    pub fn neighbour(&self, pos: usize, dir: Direction) -> Option<usize> {
        let (dr, dc) = dir.delta();
        let r = (pos / self.cols).checked_add_signed(dr)?;
        let c = (pos % self.cols).checked_add_signed(dc)?;
        (r < self.rows && c < self.cols).then_some(r * self.cols + c)
    }

    /// Whether a box stands on `pos`.
    pub fn has_box(&self, pos: usize) -> bool {
        self.boxes.contains(&pos)
    }

    /// Floor or target with no box on it.
    pub fn is_free(&self, pos: usize) -> bool {
        self.tiles[pos] != Tile::Wall && !self.has_box(pos)
    }

    /// Boxes standing on targets.
    pub fn boxes_on_target(&self) -> usize {
        self.boxes
            .iter()
            .filter(|&&b| self.tiles[b] == Tile::Target)
            .count()
    }

    /// All boxes on targets (RAGEN `success`).
    pub fn is_solved(&self) -> bool {
        self.boxes_on_target() == self.boxes.len()
    }

    /// gym-sokoban's push-or-move rule: if the next cell holds a box and the cell beyond is
    /// free floor or target, push the box and step; else if the next cell is free, step; else
    /// nothing happens.
    pub fn apply(&mut self, dir: Direction) -> MoveOutcome {
        let stay = MoveOutcome {
            moved: false,
            pushed: false,
        };
        let Some(next) = self.neighbour(self.player, dir) else {
            return stay;
        };
        if let Some(i) = self.boxes.iter().position(|&b| b == next) {
            match self.neighbour(next, dir) {
                Some(beyond) if self.is_free(beyond) => {
                    self.boxes[i] = beyond;
                    self.player = next;
                    MoveOutcome {
                        moved: true,
                        pushed: true,
                    }
                }
                _ => stay,
            }
        } else if self.tiles[next] != Tile::Wall {
            self.player = next;
            MoveOutcome {
                moved: true,
                pushed: false,
            }
        } else {
            stay
        }
    }

    /// The observation text: one line per row joined by `"\n"` (no trailing newline), one
    /// symbol per cell (RAGEN's `render(mode="text")`).
    pub fn render(&self, vocab: GridVocab) -> String {
        let s = symbols(vocab);
        let mut out = String::with_capacity(self.rows * (self.cols * 3 + 1));
        for r in 0..self.rows {
            if r > 0 {
                out.push('\n');
            }
            for c in 0..self.cols {
                let pos = r * self.cols + c;
                let on_target = self.tiles[pos] == Tile::Target;
                let sym = if pos == self.player {
                    if on_target {
                        s.player_on_target
                    } else {
                        s.player
                    }
                } else if self.has_box(pos) {
                    if on_target { s.box_on_target } else { s.box_ }
                } else {
                    match self.tiles[pos] {
                        Tile::Wall => s.wall,
                        Tile::Floor => s.empty,
                        Tile::Target => s.target,
                    }
                };
                out.push(sym);
            }
        }
        out
    }

    /// Parse a level from its rendering in `vocab` (rows separated by newlines, all of equal
    /// width). Returns `None` on an unknown symbol, ragged rows, or not exactly one player.
    pub fn parse(text: &str, vocab: GridVocab) -> Option<Level> {
        let s = symbols(vocab);
        let lines: Vec<&str> = text.lines().collect();
        let rows = lines.len();
        let cols = lines.first()?.chars().count();
        let (mut tiles, mut boxes, mut players) = (Vec::new(), Vec::new(), Vec::new());
        for line in &lines {
            if line.chars().count() != cols {
                return None;
            }
            for ch in line.chars() {
                let pos = tiles.len();
                let on_target = [s.target, s.box_on_target, s.player_on_target].contains(&ch);
                if ch == s.wall {
                    tiles.push(Tile::Wall);
                    continue;
                }
                if ![
                    s.empty,
                    s.target,
                    s.box_on_target,
                    s.box_,
                    s.player,
                    s.player_on_target,
                ]
                .contains(&ch)
                {
                    return None;
                }
                tiles.push(if on_target { Tile::Target } else { Tile::Floor });
                if ch == s.box_ || ch == s.box_on_target {
                    boxes.push(pos);
                }
                if ch == s.player || ch == s.player_on_target {
                    players.push(pos);
                }
            }
        }
        (players.len() == 1).then(|| Level {
            rows,
            cols,
            tiles,
            player: players[0],
            boxes,
        })
    }
}

/// The seven symbols of a vocabulary.
#[derive(Debug, Clone, Copy)]
pub struct Symbols {
    /// Wall.
    pub wall: char,
    /// Empty floor.
    pub empty: char,
    /// Empty target.
    pub target: char,
    /// Box on a target.
    pub box_on_target: char,
    /// Box off target.
    pub box_: char,
    /// Player on floor.
    pub player: char,
    /// Player on a target.
    pub player_on_target: char,
}

/// The symbols of `vocab` (RAGEN `grid_lookup` codes 0-6).
pub fn symbols(vocab: GridVocab) -> Symbols {
    match vocab {
        GridVocab::Standard => Symbols {
            wall: '#',
            empty: '_',
            target: 'O',
            box_on_target: '\u{221a}',
            box_: 'X',
            player: 'P',
            player_on_target: 'S',
        },
        GridVocab::Alternate => Symbols {
            wall: 'W',
            empty: '.',
            target: 'G',
            box_on_target: 'C',
            box_: 'B',
            player: 'A',
            player_on_target: '@',
        },
    }
}

/// The symbol legend for prompts, in RAGEN's `grid_vocab` order and wording.
pub fn legend(vocab: GridVocab) -> Vec<(char, &'static str)> {
    let s = symbols(vocab);
    vec![
        (s.wall, "wall"),
        (s.empty, "empty"),
        (s.target, "target"),
        (s.box_on_target, "box on target"),
        (s.box_, "box"),
        (s.player, "player"),
        (s.player_on_target, "player on target"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOM: &str = "######\n#_P__#\n#_X_O#\n#___O#\n#____#\n######";

    #[test]
    fn render_round_trips_and_has_no_trailing_newline() {
        let level = Level::parse(ROOM, GridVocab::Standard).unwrap();
        assert_eq!(level.render(GridVocab::Standard), ROOM);
        assert_eq!(
            level.render(GridVocab::Alternate),
            "WWWWWW\nW.A..W\nW.B.GW\nW...GW\nW....W\nWWWWWW"
        );
    }

    #[test]
    fn push_moves_box_and_player() {
        let mut level = Level::parse(ROOM, GridVocab::Standard).unwrap();
        let out = level.apply(Direction::Down);
        assert_eq!(
            out,
            MoveOutcome {
                moved: true,
                pushed: true
            }
        );
        assert_eq!(
            level.render(GridVocab::Standard),
            "######\n#____#\n#_P_O#\n#_X_O#\n#____#\n######"
        );
    }

    #[test]
    fn wall_and_blocked_box_stop_the_player() {
        let mut level = Level::parse("#####\n#P_X#\n#_O_#\n#####", GridVocab::Standard).unwrap();
        assert!(!level.apply(Direction::Up).moved, "walking into a wall");
        assert!(level.apply(Direction::Right).moved);
        let before = level.clone();
        let out = level.apply(Direction::Right);
        assert_eq!(
            out,
            MoveOutcome {
                moved: false,
                pushed: false
            },
            "box against a wall"
        );
        assert_eq!(level, before);
    }

    #[test]
    fn box_cannot_be_pushed_into_another_box() {
        let mut level =
            Level::parse("######\n#PXX_#\n#O_O_#\n######", GridVocab::Standard).unwrap();
        let before = level.clone();
        assert!(!level.apply(Direction::Right).moved);
        assert_eq!(level, before);
    }

    #[test]
    fn player_on_target_renders_as_s() {
        let mut level =
            Level::parse("#####\n#PO_#\n#_X_#\n#_O_#\n#####", GridVocab::Standard).unwrap();
        level.apply(Direction::Right);
        assert_eq!(
            level.render(GridVocab::Standard),
            "#####\n#_S_#\n#_X_#\n#_O_#\n#####"
        );
        assert!(Direction::parse(" rIGHT ") == Some(Direction::Right));
        assert!(Direction::parse("Jump").is_none());
    }
}
