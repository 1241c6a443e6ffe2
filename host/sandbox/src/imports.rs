//! The host imports a plugin may call: `ragen:gym/log` (capped, tagged with the plugin id) and
//! `ragen:gym/http` (through the per-instance capability gate, [`crate::http::HttpGate`]). One
//! impl each serves env and reward plugins (`crate::bindings` generates each interface once).

use crate::bindings::{ragen, wit_http, wit_log};
use crate::http::HttpError;
use crate::limits::{MAX_LOG_LINE_BYTES, MAX_LOG_LINES_PER_CALL};
use crate::state::HostState;

impl ragen::gym::types::Host for HostState {}

impl wit_log::Host for HostState {
    fn log(&mut self, level: wit_log::Level, message: String) {
        self.log_lines_this_call += 1;
        if self.log_lines_this_call > MAX_LOG_LINES_PER_CALL {
            self.log_dropped += 1;
            return;
        }
        let mut msg = message;
        if msg.len() > MAX_LOG_LINE_BYTES {
            let mut cut = MAX_LOG_LINE_BYTES;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push_str("...");
        }
        let plugin = self.plugin_id.as_str();
        match level {
            wit_log::Level::Debug => tracing::debug!(target: "plugin", plugin, "{msg}"),
            wit_log::Level::Info => tracing::info!(target: "plugin", plugin, "{msg}"),
            wit_log::Level::Warn => tracing::warn!(target: "plugin", plugin, "{msg}"),
            wit_log::Level::Error => tracing::error!(target: "plugin", plugin, "{msg}"),
        }
    }
}

impl wit_http::Host for HostState {
    fn fetch(
        &mut self,
        request: wit_http::Request,
    ) -> Result<wit_http::Response, wit_http::HttpError> {
        let result = match &self.http {
            Some(gate) => gate.fetch(request.into()),
            None => Err(HttpError::Denied(
                "this plugin has no http capability".into(),
            )),
        };
        result.map(Into::into).map_err(Into::into)
    }
}
