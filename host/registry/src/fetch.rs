//! Plugin downloads by URL, through the bounded client: the body under the plugin cap, the
//! overall deadline and the minimum rate; an error status names the URL.

use crate::error::RegistryError;
use ragen_gym_net::header::HeaderMap;
use ragen_gym_net::{Client, Url, redact_url};

/// GET `url` into memory.
pub(crate) async fn download(client: &Client, url: &Url) -> Result<Vec<u8>, RegistryError> {
    let (status, body) = client.get(url, HeaderMap::new()).await?;
    if !(200..300).contains(&status) {
        return Err(RegistryError::Status {
            url: redact_url(url),
            status,
        });
    }
    Ok(body)
}
