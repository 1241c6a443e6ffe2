//! Observations as boards: the grid part of an observation text, found with the env's symbol
//! legend (the spec's `symbol_legend`, WIT `symbol`), and the CSS class of each symbol.
//!
//! An observation of a grid env is the board, one line per row (RAGEN's `render(mode="text")`),
//! possibly after other lines (Sokoban's `grid_coord` format states coordinates first). The board
//! is the last run of at least two lines of equal width made only of legend symbols.

use ragen_gym_core::Symbol;
use serde::Serialize;
use std::collections::BTreeSet;

/// One legend entry as the page uses it: the symbol, its meaning and the CSS class of its cells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegendEntry {
    /// The symbol (one character).
    pub symbol: String,
    /// Its meaning, from the env's legend (`player`, `box on target`, ...).
    pub meaning: String,
    /// `c-` and the meaning in lower case with every other character a dash (`c-box-on-target`).
    pub class: String,
}

/// The CSS class of a legend meaning.
pub fn class_of(meaning: &str) -> String {
    let slug: String = meaning
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("c-{slug}")
}

/// The page's legend: the entries whose symbol is one character (a board cell is one).
pub fn legend_entries(legend: &[Symbol]) -> Vec<LegendEntry> {
    legend
        .iter()
        .filter(|s| s.symbol.chars().count() == 1)
        .map(|s| LegendEntry {
            symbol: s.symbol.clone(),
            meaning: s.meaning.clone(),
            class: class_of(&s.meaning),
        })
        .collect()
}

/// An observation split around its board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observation {
    /// The text before the board (all of it when there is no board).
    pub text: String,
    /// The board's rows, when the observation has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<Vec<String>>,
    /// The text after the board.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub after: String,
}

/// Split `text` around its board: the last run of two or more lines of equal width (at least
/// two cells) whose characters are all in `symbols`. Without symbols, or without such a run,
/// the observation is all text.
pub fn split_observation(text: &str, symbols: &BTreeSet<char>) -> Observation {
    let lines: Vec<&str> = text.split('\n').collect();
    let is_row = |l: &str| l.chars().count() >= 2 && l.chars().all(|c| symbols.contains(&c));
    let mut best: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < lines.len() {
        if !is_row(lines[i]) {
            i += 1;
            continue;
        }
        let width = lines[i].chars().count();
        let mut j = i + 1;
        while j < lines.len() && is_row(lines[j]) && lines[j].chars().count() == width {
            j += 1;
        }
        if j - i >= 2 {
            best = Some((i, j));
        }
        i = j;
    }
    match best {
        None => Observation {
            text: text.to_string(),
            grid: None,
            after: String::new(),
        },
        Some((start, end)) => Observation {
            text: lines[..start].join("\n"),
            grid: Some(lines[start..end].iter().map(|l| l.to_string()).collect()),
            after: lines[end..].join("\n"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sokoban() -> BTreeSet<char> {
        "#_O\u{221a}XPS".chars().collect()
    }

    #[test]
    fn a_plain_grid_is_all_board() {
        let o = split_observation("######\n#_P__#\n#_X_O#\n######", &sokoban());
        assert_eq!(o.text, "");
        assert_eq!(
            o.grid.unwrap(),
            ["######", "#_P__#", "#_X_O#", "######"].map(String::from)
        );
        assert_eq!(o.after, "");
    }

    #[test]
    fn the_coordinate_format_keeps_its_header_as_text() {
        let text = "Board: 4 rows x 4 columns.\nTargets: (2, 1)\nPlayer: (1, 2)\nGrid:\n####\n#_P#\n#O_#\n####";
        let o = split_observation(text, &sokoban());
        assert_eq!(
            o.text,
            "Board: 4 rows x 4 columns.\nTargets: (2, 1)\nPlayer: (1, 2)\nGrid:"
        );
        assert_eq!(o.grid.unwrap()[1], "#_P#");
    }

    #[test]
    fn ragged_rows_unknown_symbols_and_single_lines_are_text() {
        for text in [
            "####\n#P#\n####",
            "####\n#Pz#\n####",
            "#P_#",
            "<script>x</script>",
        ] {
            let o = split_observation(text, &sokoban());
            assert_eq!((o.grid, o.text.as_str()), (None, text), "{text}");
        }
        assert_eq!(split_observation("##\n##", &BTreeSet::new()).grid, None);
    }

    #[test]
    fn classes_are_slugs_of_the_meanings() {
        assert_eq!(class_of("box on target"), "c-box-on-target");
        assert_eq!(class_of("Player"), "c-player");
        assert_eq!(class_of("\"><x"), "c----x");
    }
}
