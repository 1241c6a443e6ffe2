//! `ragen-gym view RUN_DIR [--out FILE.html] [--open] [--sample N] [--replay [--trajectory N]]`:
//! the run's logged trajectories as one self-contained HTML page: a header (env, model, config
//! and plugin digests, the success curves of `plot`), then each episode turn by turn: the board
//! drawn from the env's symbol legend, the response with its actions marked, each step's reward,
//! the outcome, and the StarPO-S filter's verdict on its group; filters by iteration, outcome
//! and verdict; `j`/`k` between episodes. `--replay` re-runs episodes on the env (as `ragen-gym
//! replay`) and shows where each first diverges.

pub mod env;
pub mod episode;
pub mod grid;
pub mod header;
pub mod html;
pub mod load;
pub mod response;

use crate::shared::sandbox::SandboxArgs;
use anyhow::Context;
use episode::{Episode, Reading};
use header::Header;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Arguments of `ragen-gym view`.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory (of `train`, `sft`, or `eval --model … --run-dir`).
    #[arg(value_name = "RUN_DIR")]
    pub run_dir: PathBuf,
    /// The page to write (default `RUN_DIR/view.html`).
    #[arg(long, value_name = "FILE.html")]
    pub out: Option<PathBuf>,
    /// Open the page in the desktop's browser (`xdg-open`, `open` on macOS) once written.
    #[arg(long)]
    pub open: bool,
    /// Put at most N episodes on the page, spread evenly over the file (default: every logged
    /// one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample: Option<u64>,
    /// Re-run the page's episodes on the env (as `ragen-gym replay`) and show where each first
    /// diverges.
    #[arg(long)]
    pub replay: bool,
    /// With `--replay`: replay only line N of the trajectories file (0-based), and open the page
    /// on it.
    #[arg(long, value_name = "N", requires = "replay")]
    pub trajectory: Option<usize>,
    /// Load the env plugin from here instead of the recorded reference (its sha256 must match).
    #[arg(long = "env", value_name = "PLUGIN")]
    pub env: Option<String>,
    /// Sandbox limits, grants and plugin sources for loading the env.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Everything the page shows.
#[derive(Serialize)]
struct PageData {
    header: Header,
    episodes: Vec<Episode>,
    /// The trajectory line to open on.
    initial: Option<usize>,
}

/// `agent_proxy.action_sep` of the run's `config.toml` (`||` when it has none).
fn action_sep(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("config.toml");
    if !path.is_file() {
        return Ok("||".into());
    }
    let text = load::read_text(&path, load::MAX_SMALL_BYTES)?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    Ok(v.get("agent_proxy")
        .and_then(|a| a.get("action_sep"))
        .and_then(toml::Value::as_str)
        .unwrap_or("||")
        .to_string())
}

/// The page's data for `args`, and how many episodes diverged on replay.
fn page_data(args: &Args) -> anyhow::Result<(PageData, usize)> {
    let dir = &args.run_dir;
    anyhow::ensure!(dir.is_dir(), "{} is not a run directory", dir.display());
    let names = ["trajectories.jsonl", "sft_trajectories.jsonl"];
    let path = load::first_existing(dir, &names)
        .with_context(|| format!("{} has no {}", dir.display(), names.join(" or ")))?;
    let metrics = match load::first_existing(dir, &["metrics.jsonl", "sft_metrics.jsonl"]) {
        Some(m) => load::metrics(&m)?,
        None => Vec::new(),
    };
    let mut header = Header::read(dir, &metrics)?;
    header.source = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into();
    let first = load::first_record(&path)?;
    let mut reading = Reading {
        action_sep: action_sep(dir)?,
        ..Reading::default()
    };
    let mut plugin = None;
    if let Some(first) = &first {
        let at = (0, first, path.as_path());
        let env = args.env.as_deref();
        let read = |p: env::RunPlugin| -> anyhow::Result<_> {
            let r = p.reading(first, &reading.action_sep)?;
            Ok((p, r))
        };
        match env::RunPlugin::load(dir, env, &args.sandbox, at).and_then(read) {
            Ok((p, (r, legend))) => (reading, header.legend, plugin) = (r, legend, Some(p)),
            Err(e) if args.replay => {
                return Err(e.context("--replay needs the env plugin that ran"));
            }
            Err(e) => match env::RunPlugin::load_unpinned(env, &args.sandbox, at).and_then(read) {
                Ok((p, (r, legend))) => {
                    header.notes.push(format!(
                        "legend and action names from {} as it is now (sha256 {}): the plugin \
                         that ran did not load ({e:#})",
                        p.reference,
                        p.plugin.info().sha256
                    ));
                    (reading, header.legend) = (r, legend);
                }
                Err(e2) => header.notes.push(format!(
                    "observations shown as text: the env plugin did not load ({e:#}; {e2:#})"
                )),
            },
        }
    }
    let all = load::episodes(&path, &reading)?;
    header.logged = all.len();
    let mut episodes = episode::sample(all, args.sample.map(|n| n as usize));
    let mut diverged = 0;
    if let (true, Some(p)) = (args.replay, &plugin) {
        let (replayed, d) = p.replay(&path, &mut episodes, args.trajectory)?;
        anyhow::ensure!(
            replayed > 0,
            "{} has no trajectory{} on the page to replay",
            path.display(),
            args.trajectory
                .map_or(String::new(), |n| format!(" on line {n}"))
        );
        println!(
            "replayed {replayed}: {} identical, {d} diverged",
            replayed - d
        );
        diverged = d;
    }
    let initial = args
        .trajectory
        .filter(|n| episodes.iter().any(|e| e.line == *n));
    Ok((
        PageData {
            header,
            episodes,
            initial,
        },
        diverged,
    ))
}

/// Open `page` in the desktop's browser.
fn open_in_browser(page: &Path) -> anyhow::Result<()> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let status = std::process::Command::new(opener)
        .arg(page)
        .status()
        .with_context(|| format!("failed to run {opener} to open {}", page.display()))?;
    anyhow::ensure!(
        status.success(),
        "{opener} {} failed: {status}",
        page.display()
    );
    Ok(())
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (data, diverged) = page_data(&args)?;
    let html = html::page(&data)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dir.join("view.html"));
    ragen_gym_starpo::run_dir::write_atomic(&out, html.as_bytes())
        .with_context(|| format!("failed to write {}", out.display()))?;
    println!(
        "{}: {} of {} logged episodes, {} bytes",
        out.display(),
        data.episodes.len(),
        data.header.logged,
        html.len()
    );
    if args.open {
        open_in_browser(&out)?;
    }
    if diverged > 0 {
        return Err(crate::ExpectedError::ReplayDiverged { diverged }.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
