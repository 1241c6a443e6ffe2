//! A port of thefuzz 0.19's `fuzz.token_set_ratio` (difflib backend), used by the WebShop reward.
//!
//! Source of the rules: `thefuzz/fuzz.py::_token_set`, `thefuzz/utils.py::full_process` and
//! CPython's `difflib.SequenceMatcher` (`find_longest_match`, `get_matching_blocks`, `ratio`),
//! as summarised in `shared/spec/webshop.md` §2.5. Scores are integers in `0..=100`, rounded
//! the way Python's `round` does (ties to even).

/// thefuzz `utils.full_process(s, force_ascii=True)`: drop non-ASCII characters, turn every
/// non-word character (anything but ASCII letters, digits and `_`) into a space, lowercase,
/// and strip surrounding whitespace.
pub fn full_process(s: &str) -> String {
    let mapped: String = s
        .chars()
        .filter(char::is_ascii)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect();
    mapped.trim().to_string()
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`: `2 * M / (len(a) + len(b))`, where `M` is the
/// total size of the matching blocks found by the Ratcliff/Obershelp recursion (with difflib's
/// "autojunk" popularity heuristic for `len(b) >= 200`). Two empty inputs give 1.0.
pub fn sequence_ratio(a: &[u8], b: &[u8]) -> f64 {
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    2.0 * matching_chars(a, b) as f64 / total as f64
}

/// thefuzz `fuzz.ratio`: equal strings score 100, an empty side scores 0, otherwise the rounded
/// `100 * SequenceMatcher.ratio()`.
pub fn ratio(a: &str, b: &str) -> u32 {
    if a == b {
        return 100;
    }
    if a.is_empty() || b.is_empty() {
        return 0;
    }
    (100.0 * sequence_ratio(a.as_bytes(), b.as_bytes())).round_ties_even() as u32
}

/// thefuzz `fuzz.token_set_ratio(a, b)` with its defaults (`force_ascii=True`,
/// `full_process=True`): compare the sorted intersection of the two token sets with each side's
/// intersection-plus-remainder and take the best of the three ratios. Whenever one token set
/// contains the other, the score is 100 (so `x-large` vs `large` scores 100).
pub fn token_set_ratio(a: &str, b: &str) -> u32 {
    let p1 = full_process(a);
    let p2 = full_process(b);
    if p1.is_empty() || p2.is_empty() {
        return 0;
    }
    let t1: std::collections::BTreeSet<&str> = p1.split_whitespace().collect();
    let t2: std::collections::BTreeSet<&str> = p2.split_whitespace().collect();
    let sect: Vec<&str> = t1.intersection(&t2).copied().collect();
    let d12: Vec<&str> = t1.difference(&t2).copied().collect();
    let d21: Vec<&str> = t2.difference(&t1).copied().collect();
    let sorted_sect = sect.join(" ");
    let combined_12 = format!("{} {}", sorted_sect, d12.join(" "))
        .trim()
        .to_string();
    let combined_21 = format!("{} {}", sorted_sect, d21.join(" "))
        .trim()
        .to_string();
    let sorted_sect = sorted_sect.trim();
    ratio(sorted_sect, &combined_12)
        .max(ratio(sorted_sect, &combined_21))
        .max(ratio(&combined_12, &combined_21))
}

/// Sum of the sizes of difflib's matching blocks of `a` and `b`.
fn matching_chars(a: &[u8], b: &[u8]) -> usize {
    // b2j: positions of each byte in b, with difflib's autojunk removal of popular bytes.
    let mut b2j: Vec<Vec<usize>> = vec![Vec::new(); 256];
    for (j, &c) in b.iter().enumerate() {
        b2j[c as usize].push(j);
    }
    let n = b.len();
    if n >= 200 {
        let ntest = n / 100 + 1;
        for positions in &mut b2j {
            if positions.len() > ntest {
                positions.clear();
            }
        }
    }
    let mut total = 0;
    let mut queue = vec![(0, a.len(), 0, b.len())];
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = find_longest_match(a, b, &b2j, alo, ahi, blo, bhi);
        if k > 0 {
            total += k;
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                queue.push((i + k, ahi, j + k, bhi));
            }
        }
    }
    total
}

/// difflib `find_longest_match` with no junk function: the longest block of `a[alo..ahi]` equal
/// to a block of `b[blo..bhi]`, earliest in `a` then in `b`, extended over popular bytes.
fn find_longest_match(
    a: &[u8],
    b: &[u8],
    b2j: &[Vec<usize>],
    alo: usize,
    ahi: usize,
    blo: usize,
    bhi: usize,
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0usize);
    let mut j2len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for (i, &ch) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut new_j2len = std::collections::HashMap::new();
        for &j in &b2j[ch as usize] {
            if j < blo {
                continue;
            }
            if j >= bhi {
                break;
            }
            let k = j
                .checked_sub(1)
                .and_then(|p| j2len.get(&p))
                .copied()
                .unwrap_or(0)
                + 1;
            new_j2len.insert(j, k);
            if k > bestsize {
                besti = i + 1 - k;
                bestj = j + 1 - k;
                bestsize = k;
            }
        }
        j2len = new_j2len;
    }
    while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
        besti -= 1;
        bestj -= 1;
        bestsize += 1;
    }
    while besti + bestsize < ahi
        && bestj + bestsize < bhi
        && a[besti + bestsize] == b[bestj + bestsize]
    {
        bestsize += 1;
    }
    (besti, bestj, bestsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of `shared/spec/webshop.md` §2.5 (difflib backend), threshold "> 85".
    #[test]
    fn spec_vectors() {
        let table = [
            ("x-large", "large", 100),
            ("small", "x-small", 100),
            ("xx-large", "x-large", 93),
            ("32w x 30l", "32w x 32l", 89),
            ("pack of 2", "pack of 3", 89),
            ("8.5", "8", 100),
            ("medium", "large", 18),
            ("king", "queen", 22),
            ("black", "blue", 44),
            ("soy free", "sugar free", 67),
            ("gluten free", "gluten-free", 100),
            ("machine washable", "machine wash", 86),
        ];
        for (a, b, want) in table {
            assert_eq!(token_set_ratio(a, b), want, "token_set_ratio({a:?}, {b:?})");
            assert_eq!(token_set_ratio(b, a), want, "token_set_ratio({b:?}, {a:?})");
        }
    }

    #[test]
    fn full_process_maps_punctuation_and_case() {
        assert_eq!(
            full_process("  Gluten-Free, Ünïcode_ok "),
            "gluten free  ncode_ok"
        );
    }

    #[test]
    fn ratio_edge_cases() {
        assert_eq!(ratio("", ""), 100);
        assert_eq!(ratio("abc", ""), 0);
        // difflib: "abcd" vs "bcde": one block "bcd" of 3 -> 6/8 = 0.75.
        assert_eq!(ratio("abcd", "bcde"), 75);
        assert_eq!(token_set_ratio("", "x"), 0);
        assert_eq!(token_set_ratio("!!!", "x"), 0);
    }

    #[test]
    fn autojunk_applies_to_long_b() {
        // 200 'a' then 'b': 'a' is popular in b (> 3 occurrences) and removed from b2j, so the
        // only seed is the 'b', extended backwards over the matching 'a's (difflib behaviour).
        let a = "a".repeat(10) + "b";
        let b = "a".repeat(200) + "b";
        let m = matching_chars(a.as_bytes(), b.as_bytes());
        assert_eq!(m, 11);
    }
}
