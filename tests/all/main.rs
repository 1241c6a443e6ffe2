//! integration tests
mod builtin_envs;
mod python_plugin;
mod sandbox_hostile;
mod webshop;
mod starpo;
