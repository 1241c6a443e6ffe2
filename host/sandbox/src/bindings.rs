//! Host bindings for the plugin contract in `wit/`, from ONE `bindgen!`: a host-side world that
//! includes both plugin worlds (`env-plugin` and `reward-plugin`), so every interface (`types`,
//! `log`, `http`, `environment`, `expert`, `reward-function`) is generated once and each kind's
//! exports are checked at load with the generated per-interface `GuestIndices`. (Zed's extension
//! host shares interfaces between its per-version worlds with `with:`,
//! `crates/extension_host/src/wasm_host/wit/since_v0_1_0.rs`; one world that includes both of
//! ours needs no remapping.)
//!
//! What the host lifts out of a plugin is typed by `crate::lifted` (each field's cap checked
//! before the copy) and the imports are defined by `crate::imports`; the generated records
//! serve what the host hands in (a trajectory to score, an HTTP response), converted from the
//! SDK's types (`ragen_gym_sdk::types`, the ones plugin authors use) by the `From` impls below.
//! wasmtime 48's `with:` remaps whole interfaces, packages and resources, not single records,
//! and the SDK's types cannot derive wasmtime's `ComponentType` without making every plugin
//! depend on wasmtime, so the conversion stays here.

use crate::http::{HttpError, HttpRequest, HttpResponse};
use ragen_gym_sdk::types as sdk;

wasmtime::component::bindgen!({
    inline: "
        package ragen:host;

        world plugin-host {
            include ragen:gym/env-plugin@0.1.1;
            include ragen:gym/reward-plugin@0.1.1;
        }
    ",
    path: "../../wit",
});

pub(crate) use exports::ragen::gym::environment as environment_export;
pub(crate) use exports::ragen::gym::expert as expert_export;
pub(crate) use exports::ragen::gym::reward_function as reward_export;
pub(crate) use ragen::gym::http as wit_http;
pub(crate) use ragen::gym::log as wit_log;
pub(crate) use ragen::gym::types as wit;

impl From<&sdk::Metric> for wit::Metric {
    fn from(m: &sdk::Metric) -> Self {
        Self {
            name: m.name.clone(),
            value: m.value,
        }
    }
}

impl From<&sdk::Turn> for wit::Turn {
    fn from(t: &sdk::Turn) -> Self {
        Self {
            observation: t.observation.clone(),
            response: t.response.clone(),
            think: t.think.clone(),
            answer: t.answer.clone(),
            actions: t.actions.clone(),
            env_reward: t.env_reward,
            info: t.info.iter().map(Into::into).collect(),
        }
    }
}

impl From<&sdk::Trajectory> for wit::Trajectory {
    fn from(t: &sdk::Trajectory) -> Self {
        Self {
            env_id: t.env_id.clone(),
            seed: t.seed,
            turns: t.turns.iter().map(Into::into).collect(),
            success: t.success,
        }
    }
}

impl From<wit_http::Request> for HttpRequest {
    fn from(r: wit_http::Request) -> Self {
        Self {
            method: r.method,
            url: r.url,
            headers: r.headers,
            body: r.body,
        }
    }
}

impl From<HttpResponse> for wit_http::Response {
    fn from(r: HttpResponse) -> Self {
        Self {
            status: r.status,
            headers: r.headers,
            body: r.body,
        }
    }
}

impl From<HttpError> for wit_http::HttpError {
    fn from(e: HttpError) -> Self {
        match e {
            HttpError::Denied(m) => Self::Denied(m),
            HttpError::InvalidRequest(m) => Self::InvalidRequest(m),
            HttpError::Timeout => Self::Timeout,
            HttpError::TooLarge => Self::TooLarge,
            HttpError::Transport(m) => Self::Transport(m),
        }
    }
}
