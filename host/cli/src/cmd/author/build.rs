//! `ragen-gym build [DIR]`: build the plugin project in DIR (what `ragen-gym new` writes) into
//! `DIR/build/NAME.wasm`, then run `ragen-gym inspect`'s checks on it (manifest, interface
//! version, imports and exports; no plugin code runs).
//!
//! Rust: `cargo build --release --target wasm32-wasip2 --locked`. Python and JavaScript: the
//! componentizer the project pins (componentize-py, componentize-js), found in
//! `$COMPONENTIZE_PY` / `$COMPONENTIZE_JS`, the project, or this checkout (`scripts/setup.sh`),
//! else installed into the project (`.venv`, `node_modules`) unless `--no-install`.

use super::new::checkout;
use crate::cmd::inspect;
use ragen_gym_build_support::{Language, Project, cargo_project, componentize, tools};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `ragen-gym build`.
#[derive(clap::Args)]
pub struct Args {
    /// The plugin project directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Where to write the component (default `DIR/build/NAME.wasm`).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Do not install a missing componentizer; fail naming the command that installs it.
    #[arg(long)]
    pub no_install: bool,
    /// Use no network: cargo runs `--offline`, and nothing is installed.
    #[arg(long)]
    pub offline: bool,
    /// Rust: cargo's target directory (share one between plugin crates to compile the SDK's
    /// dependencies once).
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// Print the inspection as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Build the project in `args.dir`; returns the component path.
///
/// # Errors
/// The project is malformed, a tool is missing, or the build or the inspection fails.
pub fn build(args: &Args) -> anyhow::Result<PathBuf> {
    let project = Project::load(&args.dir)?;
    let out = args.out.clone().unwrap_or_else(|| project.default_output());
    let start = Instant::now();
    match project.language {
        Language::Rust => {
            eprintln!(
                "building {} with cargo (wasm32-wasip2, --locked)",
                project.dir.display()
            );
            cargo_project::build_rust(&project, args.offline, args.target_dir.as_deref(), &out)?;
        }
        Language::Python | Language::JavaScript => {
            let install = !(args.no_install || args.offline);
            let tool = tools::find_or_install(&project, checkout().as_deref(), install)?;
            eprintln!(
                "building {} with {} {} ({})",
                project.dir.display(),
                tool.path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                tool.version,
                tool.path.display()
            );
            componentize::build_scripted(&project, &tool, &project.dir.join("build/gen"), &out)?;
        }
    }
    eprintln!(
        "built {} in {:.1} s",
        out.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(out)
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let out = build(&args)?;
    inspect::run(inspect::Args {
        plugin: out.display().to_string(),
        json: args.json,
        source: Default::default(),
    })
}
