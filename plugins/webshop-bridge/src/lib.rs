//! # ragen-webshop-bridge: WebShop as a sandboxed ragen-gym env plugin
//!
//! WebShop (Yao et al. 2022) cannot run inside WASM, so this plugin is a client of a WebShop
//! server that speaks the AgentGym env-server protocol (`/create`, `/reset`, `/step`,
//! `/available_actions`; AgentGym `agentenv_webshop/server.py`): `ragen-gym webshop serve` or
//! AgentGym's `agentenv-webshop`. It reaches the server only through the host's `ragen:gym/http`
//! import, which it declares (`Environment::CAPABILITIES`) for `127.0.0.1:3000`, `localhost:3000`, `127.0.0.1:36001`
//! and `localhost:36001` and the user must grant (`--allow-host 127.0.0.1:3000`).
//!
//! Agent-facing behaviour follows RAGEN's small WebShop setting: the simple-mode observation
//! followed by `Available actions: search[<content>], click[...]`; `search[...]`/`click[...]`
//! actions; the raw WebShop reward in `[0, 1]` at purchase; success = reward 1; 9 actions per
//! episode (`max_turns`). The reset seed picks the goal in the configured split (test 0-499,
//! dev 500-1499, train 1500+).
//!
//! ```no_run
//! use ragen_webshop_bridge::{Transport, WebShopBridge};
//! struct Loopback; // any HTTP client
//! impl Transport for Loopback {
//!     fn request(&mut self, _m: &str, _u: &str, _b: &str) -> Result<(u16, String), String> { todo!() }
//! }
//! let mut env = WebShopBridge::with_transport(r#"{"split":"test"}"#, Loopback).unwrap();
//! let first = env.reset_episode(0).unwrap();
//! let step = env.step_action("search[cotton t-shirt]").unwrap();
//! # let _ = (first, step);
//! ```

#![deny(missing_docs)]

pub mod config;
pub mod env;
pub mod guest;
#[cfg(test)]
mod proptests;
pub mod protocol;

pub use config::{BridgeConfig, Split};
pub use env::{
    INSTRUCTION, WebShopBridge, actions_for_model, is_valid_action, parse_action, spec_for,
};
pub use protocol::{AgentGymClient, AvailableActions, StepReply, Transport};

ragen_gym_sdk::export_env!(WebShopBridge<guest::GuestHttp>);
