//! Every repository path the docs cite exists: the path-looking tokens (`host/cli/src/lib.rs`,
//! `docs/gpu.md`, `configs/cpu.toml`, `host/registry`, ...) and the relative Markdown links of
//! `README.md` and `docs/*.md`, and the path-looking tokens of the `//!` module docs under
//! `host/`, `sdk/` and `plugins/`. A moved file then fails here instead of leaving a comment
//! that points nowhere (the spirit of starpo's `every_key_in_default_is_commented`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level folders whose paths are checked; a token must start with one of them.
const ROOTS: [&str; 9] = [
    "host", "sdk", "plugins", "docs", "configs", "scripts", "tests", "wit", ".ci",
];

/// Paths cited before they exist, each with why. An entry whose file exists fails
/// [`the_allow_lists_hold_only_missing_files`], so the list only shrinks.
const NOT_YET_WRITTEN: [(&str, &str); 0] = [];

/// Paths shown as examples of what a user types, not files of this repository.
const EXAMPLES: [(&str, &str); 1] = [(
    "plugins/my_env.wasm",
    "a local plugin path in `PluginRef`'s docs (host/registry/src/reference.rs)",
)];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A character that can be part of a cited path (braces for `{a,b}` groups).
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./{},*<>".contains(c)
}

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs` (one group; more are expanded recursively).
fn expand_braces(token: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (token.find('{'), token.find('}')) else {
        return vec![token.to_string()];
    };
    if close < open {
        return vec![token.to_string()];
    }
    let (head, tail) = (&token[..open], &token[close + 1..]);
    token[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{head}{alt}{tail}")))
        .collect()
}

/// The repository paths cited in `text`: tokens that start at a word boundary with one of
/// [`ROOTS`] and a `/`. A `path:line` suffix and trailing punctuation are dropped; tokens with
/// placeholders (`configs/<env>.toml`) or globs (`plugins/*`) are skipped.
fn cited_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.char_indices() {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_-./:@~$".contains(c)) {
            continue;
        }
        let rest = &text[i..];
        if !ROOTS
            .iter()
            .any(|r| rest.starts_with(r) && rest[r.len()..].starts_with('/'))
        {
            continue;
        }
        let end = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
        let mut token = &rest[..end];
        // A `{a,b}` group may hold the only comma; a trailing one ends a sentence.
        if !token.contains('{') {
            token = token.split(',').next().unwrap_or(token);
        }
        let token = token.trim_end_matches(['.', ',']);
        if token.contains(['<', '>', '*']) {
            continue;
        }
        out.extend(expand_braces(token));
    }
    out
}

/// Relative Markdown link targets of `text` (`[x](ragen-semantics.md)`), without `#anchor`.
fn markdown_links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or("");
            let external = target.contains("://") || target.starts_with("mailto:");
            (!target.is_empty() && !external).then(|| target.to_string())
        })
        .collect()
}

/// The `//!` lines of every `.rs` file under `dir`, with the file they come from.
fn module_docs(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a readable folder entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | "node_modules") && !name.starts_with('.') {
                module_docs(&path, out);
            }
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path).expect("a UTF-8 source file");
            let docs: Vec<&str> = text
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("//!"))
                .collect();
            out.push((path, docs.join("\n")));
        }
    }
}

/// Every (file citing, path cited) pair that does not exist, allow-list aside.
fn missing_citations() -> Vec<String> {
    let root = root();
    let mut sources: Vec<(PathBuf, String)> = Vec::new();
    let mut docs: Vec<PathBuf> = vec![root.join("README.md")];
    let mut md: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    md.sort();
    docs.extend(md);
    let mut missing = BTreeSet::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("a readable doc");
        for link in markdown_links(&text) {
            let base = doc.parent().expect("a doc has a folder");
            if !base.join(&link).exists() {
                missing.insert(format!("{}: link {link}", rel(&root, doc)));
            }
        }
        sources.push((doc.clone(), text));
    }
    for dir in ["host", "sdk", "plugins"] {
        module_docs(&root.join(dir), &mut sources);
    }
    for (file, text) in &sources {
        for cited in cited_paths(text) {
            let allowed = NOT_YET_WRITTEN
                .iter()
                .chain(&EXAMPLES)
                .any(|(p, _)| *p == cited);
            if !allowed && !root.join(&cited).exists() {
                missing.insert(format!("{}: {cited}", rel(&root, file)));
            }
        }
    }
    missing.into_iter().collect()
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

#[test]
fn every_path_cited_in_the_docs_exists() {
    let missing = missing_citations();
    assert!(
        missing.is_empty(),
        "cited paths that do not exist (file: path):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_allow_lists_hold_only_missing_files() {
    for (path, why) in NOT_YET_WRITTEN.iter().chain(&EXAMPLES) {
        assert!(
            !root().join(path).exists(),
            "{path} exists now: remove it from the allow-lists in tests/all/docs.rs ({why})"
        );
    }
}

#[test]
fn cited_paths_are_read_as_a_reader_would() {
    let text = "See `host/cli/src/lib.rs:24-37`, docs/gpu.md, host/starpo, and \
                host/cli/src/report/{jsonl,progress}.rs. Not https://host/x.wasm, \
                configs/<env>.toml or plugins/*; also (`tests/all`).";
    assert_eq!(
        cited_paths(text),
        [
            "host/cli/src/lib.rs",
            "docs/gpu.md",
            "host/starpo",
            "host/cli/src/report/jsonl.rs",
            "host/cli/src/report/progress.rs",
            "tests/all",
        ]
    );
    assert_eq!(
        markdown_links("[a](gpu.md#devices) [b](https://x.org/y.md) [c](../wit/)"),
        ["gpu.md", "../wit/"]
    );
}

/// The workspace members under `host/`, from the root `Cargo.toml`.
fn host_crates() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .expect("a [workspace] members list")
        .0;
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| m.starts_with("host/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_crate_tables_list_every_host_crate() {
    let crates = host_crates();
    assert!(crates.len() >= 9, "{crates:?}");
    for doc in ["docs/architecture.md", "README.md"] {
        let text = std::fs::read_to_string(root().join(doc)).expect("a readable doc");
        let missing: Vec<&String> = crates
            .iter()
            .filter(|c| !text.contains(&format!("| `{c}` |")))
            .collect();
        assert!(missing.is_empty(), "{doc}'s crate table lacks {missing:?}");
    }
}
