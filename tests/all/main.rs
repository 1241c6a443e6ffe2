//! integration tests
mod api_model;
mod builtin_envs;
mod docs;
mod learning;
mod prefix_sharing;
mod python_plugin;
mod registry;
mod replay;
mod sandbox_hostile;
mod servers;
mod starpo;
mod webshop;
mod webshop_soak;
