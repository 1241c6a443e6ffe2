//! What the subcommands share, one concept per file (after cargo-nextest's
//! `dispatch/common.rs`): the model's device ([`device`]), where plugins may come from
//! ([`source`]), how a plugin is resolved, loaded and locked ([`plugins`]), the bounds on network
//! reads ([`net`]), the sandbox flags ([`sandbox`]), the base config layers ([`config`]), and the
//! sandbox and envs of a run ([`run`]).

pub mod config;
pub mod device;
pub mod model;
pub mod net;
pub mod plugins;
pub mod run;
pub mod sandbox;
pub mod source;
