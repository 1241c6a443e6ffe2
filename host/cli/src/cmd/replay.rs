//! `ragen-gym replay RUN_DIR [--trajectory N] [--env PLUGIN]`: env-side deterministic replay.
//!
//! Each line of `RUN_DIR/trajectories.jsonl`, a [`ragen_gym_starpo::run_dir::TrajectoryRecord`],
//! records the seed, every step (action and the env's result), the plugin reference and sha256
//! and the env config. Replay loads the same plugin
//! (refusing one whose sha256 differs from the recorded one), builds the env with the recorded
//! config, resets it with the seed, sends the recorded actions and checks every observation,
//! reward and flag ([`ragen_gym_core::replay_trajectory`]). The first difference is printed as
//! a unified diff, and the command exits with code 14. It is how to answer "why did trajectory X
//! get that reward": re-run it, with logging (`RAGEN_LOG=debug`) or a patched plugin (`--env`,
//! which must still have the recorded digest). Without `--env` or `--locked`, the run
//! directory's `ragen-gym.lock` pins the plugin as `--locked` would.

use crate::ExpectedError;
use crate::shared::{plugins::load, run::new_env, sandbox::SandboxArgs};
use anyhow::Context;
use ragen_gym_core::{Divergence, ReplaySummary, replay_trajectory};
use ragen_gym_sandbox::Plugin;
use ragen_gym_starpo::RunDir;
use ragen_gym_starpo::run_dir::TrajectoryRecord;
use std::path::{Path, PathBuf};

/// Arguments of `ragen-gym replay`.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory (of `train`, or of `eval --model … --run-dir`).
    pub run_dir: PathBuf,
    /// Replay only line N of `trajectories.jsonl` (0-based); default: every line.
    #[arg(long, value_name = "N")]
    pub trajectory: Option<usize>,
    /// Load the plugin from here instead of the recorded reference (its sha256 must still match).
    #[arg(long = "env", value_name = "PLUGIN")]
    pub env: Option<String>,
    /// Sandbox limits, grants and plugin sources (an env that calls HTTP needs the same
    /// `--allow-host` as the recorded run).
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

fn location(d: &Divergence) -> String {
    let mut s = match (d.turn, d.step) {
        (Some(t), Some(k)) => format!("turn {t}, step {k}"),
        (Some(t), None) => format!("turn {t}"),
        (None, _) if d.field == "reset" => "reset".to_string(),
        (None, _) => "end of trajectory".to_string(),
    };
    if let Some(a) = &d.action {
        s.push_str(&format!(" (action {a:?})"));
    }
    s
}

/// The divergence as a unified diff of the recorded and replayed values.
pub fn render_divergence(d: &Divergence) -> String {
    let ends = |s: &str| {
        if s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    let (a, b) = (ends(&d.recorded), ends(&d.replayed));
    let diff = similar::TextDiff::from_lines(&a, &b);
    format!(
        "first difference at {}: {}\n{}",
        location(d),
        d.field,
        diff.unified_diff()
            .context_radius(3)
            .header("recorded", "replayed")
    )
}

/// The sandbox flags with the run directory's own `ragen-gym.lock` as `--locked` when it has one
/// and neither `--locked` nor an `--env` override is given: the recorded plugin must then have
/// the digest the run locked, not only the sha256 written next to each trajectory.
pub fn with_run_lock(run_dir: &Path, sandbox: &SandboxArgs, env_override: bool) -> SandboxArgs {
    let mut sandbox = sandbox.clone();
    let lock = run_dir.join(ragen_gym_registry::LOCK_FILE_NAME);
    if sandbox.source.locked.is_none() && !env_override && lock.is_file() {
        sandbox.source.locked = Some(lock);
    }
    sandbox
}

/// The plugin to replay record `i` of `path` on: `env` when given, else the recorded reference.
pub fn reference_of(
    env: Option<&str>,
    rec: &TrajectoryRecord,
    i: usize,
    path: &Path,
) -> anyhow::Result<String> {
    match (env, &rec.plugin) {
        (Some(e), _) => Ok(e.to_string()),
        (None, Some(p)) => Ok(p.clone()),
        (None, None) => anyhow::bail!(
            "{} line {i} does not record its plugin reference; pass --env PLUGIN",
            path.display()
        ),
    }
}

/// Refuse `plugin` (loaded from `reference`) unless it is the one that ran record `i` of `path`.
pub fn check_recorded_plugin(
    plugin: &Plugin,
    reference: &str,
    rec: &TrajectoryRecord,
    i: usize,
    path: &Path,
) -> anyhow::Result<()> {
    if plugin.info().sha256 != rec.plugin_sha256 {
        return Err(ExpectedError::plugin(
            reference,
            anyhow::anyhow!(
                "its sha256 {} differs from the recorded {} (line {i} of {}); replay needs the plugin that ran",
                plugin.info().sha256,
                rec.plugin_sha256,
                path.display()
            ),
        )
        .into());
    }
    Ok(())
}

/// Replay record `rec` on a new env of `plugin` built with the recorded env config.
pub fn replay_record(
    plugin: &Plugin,
    reference: &str,
    rec: &TrajectoryRecord,
    sandbox: &SandboxArgs,
) -> anyhow::Result<Result<ReplaySummary, Divergence>> {
    let env_config = rec.env_config.clone().unwrap_or_default();
    let mut env = new_env(plugin, &env_config, sandbox.grants()?)
        .with_context(|| format!("failed to build env {reference} with config {env_config:?}"))?;
    Ok(replay_trajectory(env.as_mut(), &rec.trajectory))
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let run = RunDir::open(&args.run_dir)?;
    let path = run.trajectories_path();
    let records = run.read_trajectories(args.trajectory)?;
    if records.is_empty() {
        anyhow::bail!(
            "{} has no trajectory{}",
            path.display(),
            args.trajectory
                .map_or(String::new(), |n| format!(" on line {n}"))
        );
    }
    let sandbox = with_run_lock(&args.run_dir, &args.sandbox, args.env.is_some());
    let mut loaded: Option<(String, ragen_gym_sandbox::Plugin)> = None;
    let (mut ok, mut diverged) = (0usize, 0usize);
    for (i, rec) in records {
        let reference = reference_of(args.env.as_deref(), &rec, i, &path)?;
        if loaded.as_ref().is_none_or(|(r, _)| *r != reference) {
            let plugin = load(&reference, &sandbox)?;
            loaded = Some((reference.clone(), plugin));
        }
        let plugin = &loaded.as_ref().expect("loaded above").1;
        check_recorded_plugin(plugin, &reference, &rec, i, &path)?;
        let t = &rec.trajectory;
        let label = format!(
            "trajectory {i} (seed {}, group {}, iteration {}, {})",
            t.seed,
            t.group,
            rec.iteration,
            rec.split.name()
        );
        match replay_record(plugin, &reference, &rec, &sandbox)? {
            Ok(s) => {
                ok += 1;
                println!(
                    "{label}: ok, {} turns, {} steps, score {:.4}",
                    s.turns,
                    s.steps,
                    t.score()
                );
            }
            Err(d) => {
                diverged += 1;
                println!("{label}: DIVERGED");
                print!("{}", render_divergence(&d));
            }
        }
    }
    println!("{ok} replayed identically, {diverged} diverged");
    if diverged > 0 {
        return Err(ExpectedError::ReplayDiverged { diverged }.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergence_renders_as_a_unified_diff() {
        let d = Divergence {
            turn: Some(1),
            step: Some(0),
            action: Some("Up".into()),
            field: "observation",
            recorded: "#####\n#_P_#\n#####".into(),
            replayed: "#####\n#P__#\n#####".into(),
        };
        let text = render_divergence(&d);
        assert_eq!(
            text,
            "first difference at turn 1, step 0 (action \"Up\"): observation\n\
             --- recorded\n+++ replayed\n@@ -1,3 +1,3 @@\n #####\n-#_P_#\n+#P__#\n #####\n"
        );
    }
}
