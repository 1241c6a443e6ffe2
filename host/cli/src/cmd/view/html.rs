//! The page: one HTML file with its style, script and data inline, so it opens from disk, a CI
//! artifact or an e-mail with no network. The data is JSON in a `<script type="application/json">`
//! block, escaped so that no text of it can end the block or start markup (`<`, `>`, `&` and
//! the JavaScript line terminators U+2028/U+2029 as `\uXXXX`, the escaping the HTML standard's
//! "restrictions for contents of script elements" call for), and the script inserts every text
//! with `textContent`, never as markup.

use serde::Serialize;

/// The page's style.
const STYLE: &str = include_str!("page.css");
/// The page's script.
const SCRIPT: &str = include_str!("page.js");

/// `json` with `<`, `>`, `&`, U+2028 and U+2029 as JSON `\u` escapes: the same JSON value, safe
/// inside a `<script>` element.
pub fn escape_script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page for `data`.
pub fn page<T: Serialize>(data: &T) -> anyhow::Result<String> {
    let json = escape_script_json(&serde_json::to_string(data)?);
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>ragen-gym view</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <noscript>This page draws the run with JavaScript.</noscript>\n\
         <script type=\"application/json\" id=\"run-data\">{json}</script>\n\
         <script>\n{SCRIPT}</script>\n</body>\n</html>\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_json_is_the_same_value_and_cannot_close_the_script() {
        let s = "</script><script>alert(1)</script> & \u{2028}\u{2029} <!-- x";
        let json = serde_json::to_string(&serde_json::json!({ "t": s })).unwrap();
        let e = escape_script_json(&json);
        for bad in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
            assert!(!e.contains(bad), "{e}");
        }
        let back: serde_json::Value = serde_json::from_str(&e).unwrap();
        assert_eq!(back["t"], s);
    }

    #[test]
    fn the_page_holds_the_data_in_one_script_block() {
        let p = page(&serde_json::json!({"x": "</script>"})).unwrap();
        assert_eq!(
            p.matches("</script>").count(),
            2,
            "data and script blocks only"
        );
        assert!(p.contains(r#"{"x":"\u003c/script\u003e"}"#));
        for fetch in [
            "<link",
            " src=",
            "url(",
            "@import",
            "fetch(",
            "XMLHttpRequest",
        ] {
            assert!(!p.contains(fetch), "the page loads nothing: {fetch}");
        }
    }
}
