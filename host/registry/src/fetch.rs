//! Plain HTTP(S) downloads with a size cap, an announced-length check and errors that name the
//! URL.

use crate::error::RegistryError;
use reqwest::Url;

/// The message of an error and all its sources, `a: b: c` (reqwest hides the OS error, e.g.
/// "Connection refused", in the chain).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// GET `url` into memory. A body that ends early or breaks off is [`RegistryError::Truncated`];
/// one over `max_bytes` (announced or received) is [`RegistryError::TooLarge`].
pub(crate) async fn download(
    client: &reqwest::Client,
    url: &Url,
    max_bytes: u64,
) -> Result<Vec<u8>, RegistryError> {
    let shown = url.to_string();
    let mut resp =
        client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| RegistryError::Unreachable {
                url: shown.clone(),
                reason: chain(&e),
            })?;
    let status = resp.status();
    if !status.is_success() {
        return Err(RegistryError::Status {
            url: shown,
            status: status.as_u16(),
        });
    }
    let expected = resp.content_length();
    if expected.is_some_and(|n| n > max_bytes) {
        return Err(RegistryError::TooLarge {
            url: shown,
            limit: max_bytes,
        });
    }
    let mut body = Vec::with_capacity(usize::try_from(expected.unwrap_or(0)).unwrap_or(0));
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                body.extend_from_slice(&c);
                if body.len() as u64 > max_bytes {
                    return Err(RegistryError::TooLarge {
                        url: shown,
                        limit: max_bytes,
                    });
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(url = %shown, "body error: {}", chain(&e));
                return Err(RegistryError::Truncated {
                    url: shown,
                    expected,
                    received: body.len() as u64,
                });
            }
        }
    }
    if let Some(n) = expected
        && body.len() as u64 != n
    {
        return Err(RegistryError::Truncated {
            url: shown,
            expected,
            received: body.len() as u64,
        });
    }
    Ok(body)
}
