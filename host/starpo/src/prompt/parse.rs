//! The answer parser (`docs/ragen-semantics.md` §4; RAGEN
//! `ragen/llm_agent/ctx_manager.py::_parse_response`).

/// A parsed model response.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedResponse {
    /// The cleaned, re-serialised response: stored in the history and trained on
    /// (`docs/ragen-semantics.md` §4, step 4).
    /// When the response did not match the format, the raw text.
    pub cleaned: String,
    /// Text inside `<think>..</think>` (cleaned), if it matched and thinking is on.
    pub think: Option<String>,
    /// Text inside `<answer>..</answer>` (cleaned), if it matched.
    pub answer: Option<String>,
    /// Actions from the answer: split on the separator, trimmed, empty ones dropped, truncated to
    /// `max_actions_per_turn`.
    pub actions: Vec<String>,
}

/// Strings RAGEN strips from both captured parts.
const STRIP: [&str; 6] = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<|im_start|>",
    "<|im_end|>",
];

/// Parse a generated response. `text` is the decoded generation with the forced prefix
/// (`<think>`, or `<answer>` when thinking is off) prepended, as RAGEN does.
///
/// The match is the first of `<think>(.*?)</think>\s*<answer>(.*?)</answer>` (DOTALL), or of
/// `<answer>(.*?)</answer>` with thinking off. No match: `cleaned` is the raw text and there are
/// no actions.
pub fn parse_response(
    text: &str,
    enable_think: bool,
    action_sep: &str,
    max_actions_per_turn: usize,
) -> ParsedResponse {
    let captured = if enable_think {
        match_think_answer(text)
    } else {
        match_answer(text).map(|a| (None, a))
    };
    let Some((think, answer)) = captured else {
        return ParsedResponse {
            cleaned: text.to_string(),
            think: None,
            answer: None,
            actions: Vec::new(),
        };
    };
    let clean = |s: &str| {
        let mut s = s.to_string();
        for t in STRIP {
            s = s.replace(t, "");
        }
        s.trim().to_string()
    };
    let think = think.map(clean);
    let mut answer = clean(answer);
    let mut actions: Vec<String> = answer
        .split(action_sep)
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if actions.len() > max_actions_per_turn {
        actions.truncate(max_actions_per_turn);
        answer = actions.join(&format!(" {action_sep} "));
    }
    let cleaned = match &think {
        Some(t) => format!("<think>{t}</think><answer>{answer}</answer>"),
        None => format!("<answer>{answer}</answer>"),
    };
    ParsedResponse {
        cleaned,
        think,
        answer: Some(answer),
        actions,
    }
}

/// First `<think>(.*?)</think>\s*<answer>(.*?)</answer>` match (leftmost start, lazy groups),
/// in one pass. Only the first `<think>` can start a match: a later one has fewer `</think>`s
/// after it, so whatever ends a match from it would end one from the first. Its first group ends
/// at the first `</think>` followed by whitespace and `<answer>`, if the answer closes; when
/// that answer never closes, no later one can (it would need a `</answer>` further on).
fn match_think_answer(text: &str) -> Option<(Option<&str>, &str)> {
    let body = text.find("<think>")? + "<think>".len();
    let mut search = body;
    while let Some(rel_end) = text[search..].find("</think>") {
        let end = search + rel_end;
        let after = &text[end + "</think>".len()..];
        let rest = after.trim_start_matches(|c: char| c.is_whitespace());
        if let Some(ans) = rest.strip_prefix("<answer>") {
            let ans_end = ans.find("</answer>")?;
            return Some((Some(&text[body..end]), &ans[..ans_end]));
        }
        search = end + 1;
    }
    None
}

/// First `<answer>(.*?)</answer>` match.
fn match_answer(text: &str) -> Option<&str> {
    let start = text.find("<answer>")? + "<answer>".len();
    let end = text[start..].find("</answer>")?;
    Some(&text[start..start + end])
}

/// Map parsed actions to the env's action names, case-insensitively (RAGEN
/// `es_manager._extract_map_valid_actions`). Returns the canonical names of the known actions, in
/// order, and whether any action was dropped. With `names = None` (text-action envs) every action
/// passes unchanged.
pub fn map_actions(actions: &[String], names: Option<&[String]>) -> (Vec<String>, bool) {
    let Some(names) = names else {
        return (actions.to_vec(), false);
    };
    let mut out = Vec::with_capacity(actions.len());
    let mut dropped = false;
    for a in actions {
        match names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(a) || n.to_lowercase() == a.to_lowercase())
        {
            Some(n) => out.push(n.clone()),
            None => dropped = true,
        }
    }
    (out, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_think_and_answer() {
        let p = parse_response(
            "<think> push it </think>\n <answer>Right || up ||  || Left</answer> tail",
            true,
            "||",
            5,
        );
        assert_eq!(p.think.as_deref(), Some("push it"));
        assert_eq!(p.answer.as_deref(), Some("Right || up ||  || Left"));
        assert_eq!(p.actions, vec!["Right", "up", "Left"]);
        // not truncated: the answer is kept as written (only cleaned and trimmed)
        assert_eq!(
            p.cleaned,
            "<think>push it</think><answer>Right || up ||  || Left</answer>"
        );
    }

    #[test]
    fn truncates_to_max_actions_and_reserialises() {
        let p = parse_response(
            "<think>x</think><answer>Up||Down||Left</answer>",
            true,
            "||",
            2,
        );
        assert_eq!(p.actions, vec!["Up", "Down"]);
        assert_eq!(p.cleaned, "<think>x</think><answer>Up || Down</answer>");
    }

    #[test]
    fn lazy_first_match_and_dotall() {
        let t = "<think>a\nb</think>junk<think>c</think>\n<answer>L\n</answer><answer>R</answer>";
        let p = parse_response(t, true, "||", 5);
        // the first <think> cannot reach an <answer> right after its </think> ... until the second </think>
        assert_eq!(p.think.as_deref(), Some("a\nbjunkc"));
        assert_eq!(p.actions, vec!["L"]);
    }

    #[test]
    fn no_match_keeps_raw_text() {
        let p = parse_response("<think>only thinking", true, "||", 5);
        assert_eq!(p.cleaned, "<think>only thinking");
        assert!(p.actions.is_empty());
        assert!(p.answer.is_none());
        let p = parse_response("<answer>Up</answer>", false, "||", 5);
        assert_eq!(p.cleaned, "<answer>Up</answer>");
        assert_eq!(p.actions, vec!["Up"]);
    }

    #[test]
    fn strips_special_tokens() {
        let p = parse_response(
            "<think>t<|im_end|></think><answer><|im_start|>Up</answer>",
            true,
            "||",
            5,
        );
        assert_eq!(p.cleaned, "<think>t</think><answer>Up</answer>");
    }

    #[test]
    fn maps_names_case_insensitively() {
        let names = vec!["Up".to_string(), "Down".to_string()];
        let (m, dropped) = map_actions(&["up".into(), "DOWN".into(), "jump".into()], Some(&names));
        assert_eq!(m, vec!["Up", "Down"]);
        assert!(dropped);
        let (m, dropped) = map_actions(&["uP".into()], Some(&names));
        assert_eq!(m, vec!["Up"]);
        assert!(!dropped);
    }
}
