//! The wasm transport: the host's capability-gated `ragen:gym/http` import.

use ragen_gym_sdk::http::{HttpError, Request, fetch};

use crate::protocol::Transport;

/// Sends requests through `ragen:gym/http.fetch`; the host refuses targets the manifest does not
/// declare or the user did not grant.
#[derive(Debug, Default)]
pub struct GuestHttp;

impl Transport for GuestHttp {
    fn request(&mut self, method: &str, url: &str, body: &str) -> Result<(u16, String), String> {
        let request = Request {
            method: method.to_string(),
            url: url.to_string(),
            headers: vec![("content-type".to_string(), "application/json".to_string())],
            body: body.as_bytes().to_vec(),
        };
        match fetch(&request) {
            Ok(r) => Ok((r.status, String::from_utf8_lossy(&r.body).into_owned())),
            Err(HttpError::Denied(m)) => Err(format!("denied by the host: {m}")),
            Err(HttpError::InvalidRequest(m)) => Err(format!("invalid request: {m}")),
            Err(HttpError::Timeout) => Err("timed out".to_string()),
            Err(HttpError::TooLarge) => Err("response too large".to_string()),
            Err(HttpError::Transport(m)) => Err(format!("transport error: {m}")),
        }
    }
}
