//! A port of thefuzz 0.19.0's `fuzz.token_set_ratio` (difflib backend), used by the WebShop
//! reward. 0.19.0 is the version WebShop `master` pins (`requirements.txt`).
//!
//! Sources of the rules: thefuzz 0.19.0 `fuzz.py::_token_set` and `fuzz.py::ratio`,
//! `utils.py::full_process` and `utils.py::asciidammit`, `string_processing.py::StringProcessor`
//! (the regex `(?ui)\W`), and CPython's `difflib.SequenceMatcher` (`find_longest_match`,
//! `get_matching_blocks`, `ratio`). Strings are compared as sequences of code points, as Python
//! does. Scores are integers in `0..=100`, rounded the way Python's `round` does (ties to even).
//!
//! Known limits: general categories come from Unicode 16 (the `unicode-general-category`
//! crate), Python's from its own Unicode version, so characters assigned in between may be
//! classified differently. thefuzz 0.20 and later (a rapidfuzz backend, which unpinned installs
//! such as RAGEN's `webshop-minimal` get) process text differently in three ways the test
//! vectors show: `_` separates words, lowercasing is per character (no final sigma, `İ` gives
//! `i`), and the similarity is rapidfuzz's Indel ratio instead of difflib's.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use unicode_general_category::{GeneralCategory, get_general_category};

/// A Python value handed to thefuzz: a string, or the `(name, value)` tuple that WebShop
/// `master` passes for each option of a synthetic goal (`goal.py::get_reward` hands
/// `goal['goal_options'].items()` to `get_option_reward`). thefuzz turns a non-string into text
/// with `str()`, i.e. the tuple's repr `('size', '6 ounce')`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyText<'a> {
    /// A `str`.
    Str(&'a str),
    /// A 2-tuple of `str`.
    Pair(&'a str, &'a str),
}

impl<'a> From<&'a str> for PyText<'a> {
    fn from(s: &'a str) -> Self {
        PyText::Str(s)
    }
}

impl<'a> From<&'a String> for PyText<'a> {
    fn from(s: &'a String) -> Self {
        PyText::Str(s)
    }
}

impl PyText<'_> {
    /// Python's `str()` of the value.
    pub fn to_python_str(&self) -> Cow<'_, str> {
        match *self {
            PyText::Str(s) => Cow::Borrowed(s),
            PyText::Pair(a, b) => Cow::Owned(format!("({}, {})", py_repr(a), py_repr(b))),
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has a `'` and no `"`; backslash, the
/// quote, `\t`, `\n` and `\r` escaped; other non-printable characters (ASCII controls and
/// the categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other than the space) as `\xhh`, `\uhhhh`
/// or `\Uhhhhhhhh` (CPython `unicode_repr`).
fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c if u32::from(c) <= 0xff => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one character.
fn is_printable(c: char) -> bool {
    use GeneralCategory::*;
    c == ' '
        || !matches!(
            get_general_category(c),
            Control
                | Format
                | Surrogate
                | PrivateUse
                | Unassigned
                | LineSeparator
                | ParagraphSeparator
                | SpaceSeparator
        )
}

/// A character of Python's `\w` in Unicode mode: a letter or a number (general categories L*
/// and N*) or `_`.
fn is_word(c: char) -> bool {
    use GeneralCategory::*;
    c == '_'
        || matches!(
            get_general_category(c),
            UppercaseLetter
                | LowercaseLetter
                | TitlecaseLetter
                | ModifierLetter
                | OtherLetter
                | DecimalNumber
                | LetterNumber
                | OtherNumber
        )
}

/// thefuzz `utils.full_process(s, force_ascii=True)`: remove U+0080..=U+00FF (`asciidammit`;
/// every other character stays), turn every character that is not a letter, a number or `_`
/// into a space (`(?ui)\W`), lowercase (Python's full mapping, as `str.lower`), strip.
pub fn full_process(s: &str) -> String {
    let mapped: String = s
        .chars()
        .filter(|c| !('\u{80}'..='\u{ff}').contains(c))
        .map(|c| if is_word(c) { c } else { ' ' })
        .collect();
    mapped.to_lowercase().trim().to_string()
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`: `2 * M / (len(a) + len(b))`, where `M` is the
/// total size of the matching blocks found by the Ratcliff/Obershelp recursion (with difflib's
/// "autojunk" popularity heuristic for `len(b) >= 200`). Two empty inputs give 1.0.
pub fn sequence_ratio<T: Copy + Eq + Hash>(a: &[T], b: &[T]) -> f64 {
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    2.0 * matching_elements(a, b) as f64 / total as f64
}

/// thefuzz `fuzz.ratio` on two processed strings: equal strings score 100, an empty side scores
/// 0, otherwise the rounded `100 * SequenceMatcher.ratio()` over code points.
pub fn ratio(a: &str, b: &str) -> u32 {
    if a == b {
        return 100;
    }
    if a.is_empty() || b.is_empty() {
        return 0;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    (100.0 * sequence_ratio(&a, &b)).round_ties_even() as u32
}

/// thefuzz `fuzz.token_set_ratio(a, b)` with its defaults (`force_ascii=True`,
/// `full_process=True`): compare the sorted intersection of the two token sets with each side's
/// intersection-plus-remainder and take the best of the three ratios. Whenever one token set
/// contains the other, the score is 100 (so `x-large` vs `large` scores 100).
pub fn token_set_ratio<'a>(a: impl Into<PyText<'a>>, b: impl Into<PyText<'a>>) -> u32 {
    let p1 = full_process(&a.into().to_python_str());
    let p2 = full_process(&b.into().to_python_str());
    if p1.is_empty() || p2.is_empty() {
        return 0;
    }
    let t1: BTreeSet<&str> = p1.split_whitespace().collect();
    let t2: BTreeSet<&str> = p2.split_whitespace().collect();
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
fn matching_elements<T: Copy + Eq + Hash>(a: &[T], b: &[T]) -> usize {
    // b2j: positions of each element in b, with difflib's autojunk removal of popular ones.
    let mut b2j: HashMap<T, Vec<usize>> = HashMap::new();
    for (j, &c) in b.iter().enumerate() {
        b2j.entry(c).or_default().push(j);
    }
    let n = b.len();
    if n >= 200 {
        let ntest = n / 100 + 1;
        b2j.retain(|_, positions| positions.len() <= ntest);
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
fn find_longest_match<T: Copy + Eq + Hash>(
    a: &[T],
    b: &[T],
    b2j: &HashMap<T, Vec<usize>>,
    alo: usize,
    ahi: usize,
    blo: usize,
    bhi: usize,
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0usize);
    let mut j2len: HashMap<usize, usize> = HashMap::new();
    for (i, &ch) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut new_j2len = HashMap::new();
        for &j in b2j.get(&ch).map(Vec::as_slice).unwrap_or_default() {
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

    /// Scores of the real library: thefuzz 0.19.0 (difflib backend, no python-Levenshtein) on
    /// CPython 3.11.7, printed by `host/webshop/data/fuzz_vectors.py`. Where thefuzz 0.22.1
    /// (rapidfuzz 3.14.6 backend) differs, its score is in a comment.
    #[test]
    fn token_set_ratio_matches_thefuzz_0_19() {
        let table = [
            // Non-ASCII punctuation turns into spaces; only U+0080..=U+00FF is removed.
            ("1\u{2013}2", "1-2", 100),
            ("men\u{2019}s", "mens", 89),
            ("men's", "mens", 89),
            ("caf\u{e9}", "cafe", 86),
            ("Stra\u{df}e", "strasse", 83),
            ("\u{141}\u{f3}d\u{17a}", "lodz", 29),
            // Python's str.lower (final sigma; I with dot above gives i + U+0307).
            (
                "\u{3a3}\u{39f}\u{3a6}\u{39f}\u{3a3}",
                "\u{3c3}\u{3bf}\u{3c6}\u{3bf}\u{3c2}",
                100,
            ), // 0.22.1: 80
            ("\u{130}stanbul", "istanbul", 94), // 0.22.1: 100
            // Marks (Mn, Mc) are not word characters; letters and numbers of any script are.
            ("e\u{301}t\u{e9}", "ete", 67),
            (
                "\u{939}\u{93f}\u{902}\u{926}\u{940}",
                "\u{939} \u{926}",
                100,
            ),
            ("\u{ff38}\u{ff2c}", "xl", 0),
            ("\u{216b} pack", "pack", 100),
            ("\u{bd} cup", "cup", 100),
            ("10\u{a0}oz", "10 oz", 89),
            ("10\u{2003}oz", "10 oz", 100),
            ("gluten_free", "gluten free", 55), // 0.22.1: 100
            ("\u{6771}\u{4eac} tower", "tower", 100),
            ("\u{2014}", "x", 0),
            // WebShop option and attribute pairs.
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
        // difflib's autojunk (len(b) >= 200), same library run.
        let (a, b) = ("a".repeat(10) + "b", "a".repeat(200) + "b");
        assert_eq!(token_set_ratio(a.as_str(), b.as_str()), 10);
    }

    /// `fuzz.token_set_ratio(purchased_value, (name, value))` as WebShop `master` calls it for a
    /// synthetic goal; same library run as above (0.22.1 agrees on every row).
    #[test]
    fn pairs_are_scored_through_their_python_repr() {
        let table = [
            (("size", "6 ounce"), "6 ounce", 100),
            (("size", "large"), "x-large", 83),
            (("size", "x-large"), "large", 100),
            (("size", "large"), "large", 100),
            (("color", "navy blue"), "navy blue", 100),
            (("color", "heather grey"), "grey", 100),
            (("flavor name", "sea salt"), "sea salt & vinegar", 67),
            (("size", "men's 8"), "men's 8", 100),
            // repr escapes non-printable characters into letters and digits.
            (("size", "10\u{a0}oz"), "10 oz", 57),
            (("size", "1\u{2013}2 years"), "1-2 years", 100),
            (("color", "caf\u{e9}"), "cafe", 46),
            (("size", "a\nb"), "a n b", 57),
            (("size", "it's \"xl\""), "it s xl", 100),
            (("size", "x\u{2028}l"), "x u2028 l", 73),
        ];
        for ((name, value), purchased, want) in table {
            let pair = PyText::Pair(name, value);
            assert_eq!(
                token_set_ratio(purchased, pair),
                want,
                "token_set_ratio({purchased:?}, ({name:?}, {value:?}))"
            );
        }
        assert_eq!(
            PyText::Pair("size", "it's \"xl\"").to_python_str(),
            r#"('size', 'it\'s "xl"')"#
        );
        assert_eq!(
            PyText::Pair("men's", "a\\b\u{a0}\u{2028}\u{1F600}").to_python_str(),
            "(\"men's\", 'a\\\\b\\xa0\\u2028\u{1F600}')"
        );
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
        let m = matching_elements(a.as_bytes(), b.as_bytes());
        assert_eq!(m, 11);
    }
}
