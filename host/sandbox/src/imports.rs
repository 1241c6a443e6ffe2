//! The host imports a plugin may call: `ragen:gym/log` (capped, tagged with the plugin id) and
//! `ragen:gym/http` (through the per-instance capability gate, [`crate::http::HttpGate`]). One
//! definition each serves env and reward plugins.
//!
//! Both read their arguments under the host's caps before copying them (`crate::lift`): a log
//! line is clipped to [`MAX_LOG_LINE_BYTES`] while it is lifted, so a plugin that logs 100 MB in
//! one line loses nothing but the line's tail; an http request is lifted lazily (wasmtime's
//! `WasmStr` and `WasmList` point into the guest's memory), so the grant is checked before a
//! header is read and a request with tens of thousands of headers is answered "not granted" or
//! "over the cap of 64 headers", not with an exhausted copy budget.

use crate::bindings::{wit_http, wit_log};
use crate::http::{HttpError, HttpRequest};
use crate::lift::{Clipped, text_fields};
use crate::limits::{
    MAX_HTTP_HEAD_BYTES, MAX_HTTP_HEADERS, MAX_LOG_LINE_BYTES, MAX_LOG_LINES_PER_CALL,
};
use crate::state::HostState;
use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Lift, Linker, WasmList, WasmStr};

text_fields! {
    /// A log line.
    LogLine = "log line", MAX_LOG_LINE_BYTES;
}

/// The interface names the host defines; a plugin built against any semver-compatible version
/// of the contract links to them.
const LOG: &str = "ragen:gym/log@0.1.1";
const HTTP: &str = "ragen:gym/http@0.1.1";

/// Define `ragen:gym/log` and `ragen:gym/http` in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.instance(LOG)?.func_wrap(
        "log",
        |mut store: StoreContextMut<'_, HostState>,
         (level, line): (wit_log::Level, Clipped<LogLine>)| {
            store.data_mut().log(level, &line);
            Ok(())
        },
    )?;
    linker.instance(HTTP)?.func_wrap(
        "fetch",
        |mut store: StoreContextMut<'_, HostState>, (request,): (LazyRequest,)| {
            let reply: Result<wit_http::Response, wit_http::HttpError> =
                fetch(&mut store, &request)
                    .map(Into::into)
                    .map_err(Into::into);
            Ok((reply,))
        },
    )?;
    Ok(())
}

impl HostState {
    /// One log line: counted against the per-call cap, tagged with the plugin id.
    fn log(&mut self, level: wit_log::Level, line: &Clipped<LogLine>) {
        self.log_lines_this_call += 1;
        if self.log_lines_this_call > MAX_LOG_LINES_PER_CALL {
            self.log_dropped += 1;
            return;
        }
        let ellipsis = if line.was_clipped() {
            self.log_clipped += 1;
            "..."
        } else {
            ""
        };
        let msg = &line.text;
        let plugin = self.plugin_id.as_str();
        match level {
            wit_log::Level::Debug => tracing::debug!(target: "plugin", plugin, "{msg}{ellipsis}"),
            wit_log::Level::Info => tracing::info!(target: "plugin", plugin, "{msg}{ellipsis}"),
            wit_log::Level::Warn => tracing::warn!(target: "plugin", plugin, "{msg}{ellipsis}"),
            wit_log::Level::Error => tracing::error!(target: "plugin", plugin, "{msg}{ellipsis}"),
        }
    }
}

/// `http.request`, lifted lazily: its strings and lists still point into the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LazyRequest {
    method: WasmStr,
    url: WasmStr,
    headers: WasmList<(WasmStr, WasmStr)>,
    body: WasmList<u8>,
}

/// Read the request under the caps (method and URL first, the grant, then headers and body)
/// and send it through the gate.
fn fetch(
    store: &mut StoreContextMut<'_, HostState>,
    req: &LazyRequest,
) -> Result<crate::http::HttpResponse, HttpError> {
    let invalid = |e: wasmtime::Error| HttpError::InvalidRequest(format!("{e:#}"));
    let Some(gate) = &store.data().http else {
        return Err(HttpError::Denied(
            "this plugin has no http capability".into(),
        ));
    };
    let method = req.method.to_str(&*store).map_err(invalid)?;
    let url = req.url.to_str(&*store).map_err(invalid)?;
    gate.admit(&method, &url)?;
    let (method, url) = (method.into_owned(), url.into_owned());
    let count = req.headers.len();
    if count > MAX_HTTP_HEADERS {
        return Err(HttpError::InvalidRequest(format!(
            "request has {count} headers, over the cap of {MAX_HTTP_HEADERS}"
        )));
    }
    let mut headers = Vec::with_capacity(count);
    let mut head_bytes = 0usize;
    for i in 0..count {
        let Some(pair) = req.headers.get(&mut *store, i) else {
            break;
        };
        let (name, value) = pair.map_err(invalid)?;
        let name = name.to_str(&*store).map_err(invalid)?;
        let value = value.to_str(&*store).map_err(invalid)?;
        head_bytes = head_bytes.saturating_add(name.len() + value.len());
        if head_bytes > MAX_HTTP_HEAD_BYTES {
            return Err(HttpError::InvalidRequest(format!(
                "request headers are over the cap of {MAX_HTTP_HEAD_BYTES} bytes"
            )));
        }
        headers.push((name.into_owned(), value.into_owned()));
    }
    let gate_body_cap = gate_body_cap(store);
    if req.body.len() > gate_body_cap {
        return Err(HttpError::InvalidRequest(format!(
            "request body of {} bytes is over the cap of {gate_body_cap}",
            req.body.len()
        )));
    }
    let body = req.body.as_le_slice(&*store).to_vec();
    let request = HttpRequest {
        method,
        url,
        headers,
        body,
    };
    match &store.data().http {
        Some(gate) => gate.fetch(request),
        None => unreachable!("checked above"),
    }
}

fn gate_body_cap(store: &StoreContextMut<'_, HostState>) -> usize {
    store
        .data()
        .http
        .as_ref()
        .map_or(0, |gate| gate.max_body_bytes)
}
