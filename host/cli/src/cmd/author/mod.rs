//! The plugin author's commands: `ragen-gym new` writes a plugin project in Rust, Python or
//! JavaScript, `ragen-gym build` builds one into a checked component (`docs/plugins.md`).

pub mod build;
mod lockfile;
pub mod new;
pub mod templates;
