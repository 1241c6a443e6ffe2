//! integration tests
mod builtin_envs;
mod learning;
mod python_plugin;
mod sandbox_hostile;
mod starpo;
mod webshop;
mod webshop_soak;
