//! Keeping credentials out of what is stored and printed: a URL's user info and its secret
//! query values ([`redact_url`]), and a key quoted back by a server ([`redact_secret`]).

use reqwest::Url;

/// What replaces a redacted value.
pub const REDACTED: &str = "***";

/// Query parameter names whose values are credentials (matched case-insensitively as parts of
/// the name: `access_token`, `X-Amz-Signature`, `X-Amz-Credential`, Azure's `sig`, `api_key`).
const SECRET_PARAM_PARTS: &[&str] = &[
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "pwd",
    "auth",
    "sig",
    "credential",
    "session",
];

/// Whether a query parameter named `name` carries a credential.
pub fn is_secret_param(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_PARAM_PARTS.iter().any(|p| lower.contains(p))
}

/// Whether `url` carries credentials: user info (`user:pass@`) or a secret query value.
pub fn has_credentials(url: &Url) -> bool {
    !url.username().is_empty()
        || url.password().is_some()
        || url.query_pairs().any(|(k, _)| is_secret_param(&k))
}

/// `url` as it may be stored or printed: without user info, and with the value of every
/// secret query parameter ([`is_secret_param`]) replaced by [`REDACTED`]. A URL without
/// credentials is returned unchanged.
pub fn redact_url(url: &Url) -> String {
    if !has_credentials(url) {
        return url.to_string();
    }
    let mut out = url.clone();
    // Cannot fail for http(s) URLs with a host, the only ones a client sends.
    let _ = out.set_username("");
    let _ = out.set_password(None);
    if url.query_pairs().any(|(k, _)| is_secret_param(&k)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    REDACTED.to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        out.query_pairs_mut().clear().extend_pairs(pairs);
    }
    out.to_string()
}

/// `text` with every occurrence of `secret` and every `Bearer <token>` replaced by
/// [`REDACTED`], then cut to `max_chars` characters. Redacting before cutting means a cut can
/// never leave a prefix of the secret behind.
pub fn redact_secret(text: &str, secret: Option<&str>, max_chars: usize) -> String {
    let mut s = match secret.filter(|k| !k.is_empty()) {
        Some(k) => text.replace(k, REDACTED),
        None => text.to_string(),
    };
    s = redact_bearer(&s);
    s.chars().take(max_chars).collect()
}

/// Replace the token after each `Bearer ` (any case) with [`REDACTED`].
fn redact_bearer(text: &str) -> String {
    const WORD: &str = "bearer ";
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = lower[i..].find(WORD) {
        let start = i + at + WORD.len();
        out.push_str(&text[i..start]);
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}' | ']'))
            .map_or(text.len(), |n| start + n);
        if end > start {
            out.push_str(REDACTED);
        }
        i = end;
    }
    out.push_str(&text[i..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_and_secret_query_values_are_not_kept() {
        let u = Url::parse(
            "https://alice:s3cret@example.org/p/x.wasm?X-Amz-Signature=abc&v=2&access_token=t0k",
        )
        .unwrap();
        assert!(has_credentials(&u));
        let r = redact_url(&u);
        assert_eq!(
            r,
            "https://example.org/p/x.wasm?X-Amz-Signature=***&v=2&access_token=***"
        );
        assert!(!r.contains("s3cret") && !r.contains("alice") && !r.contains("t0k"));
        let plain = Url::parse("http://127.0.0.1:8000/x.wasm?v=2").unwrap();
        assert!(!has_credentials(&plain));
        assert_eq!(redact_url(&plain), "http://127.0.0.1:8000/x.wasm?v=2");
        let token_only = Url::parse("https://h/x?token=abc").unwrap();
        assert_eq!(redact_url(&token_only), "https://h/x?token=***");
    }

    #[test]
    fn an_echoed_key_is_redacted_before_the_text_is_cut() {
        let body = r#"{"error":"bad auth header: Bearer sk-live-123456","echo":"sk-live-123456"}"#;
        let r = redact_secret(body, Some("sk-live-123456"), 1000);
        assert!(!r.contains("sk-live"), "{r}");
        assert_eq!(r, r#"{"error":"bad auth header: Bearer ***","echo":"***"}"#);
        // a cut through the key's position leaves no prefix of it
        let r = redact_secret("xx sk-live-123456", Some("sk-live-123456"), 6);
        assert_eq!(r, "xx ***");
        // a bearer token that is not the key is redacted too
        assert_eq!(
            redact_secret("authorization: bearer abc.def", None, 100),
            "authorization: bearer ***"
        );
    }
}
