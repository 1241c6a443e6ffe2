//! The plugin's transport: the host's capability-gated `ragen:gym/http` import (refused in a
//! native build, where tests use their own transport).

use ragen_gym_sdk::http::{Request, fetch};

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
        fetch(&request)
            .map(|r| (r.status, String::from_utf8_lossy(&r.body).into_owned()))
            .map_err(|e| e.to_string())
    }
}
