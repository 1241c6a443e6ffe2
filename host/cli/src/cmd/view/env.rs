//! The run's env as the page needs it: the symbol legend (boards) and the action names
//! (responses), from the spec of the plugin that ran (loaded as `replay` loads it: the recorded
//! reference, pinned by the run's `ragen-gym.lock` and checked against the recorded sha256), and
//! `--replay`, which re-runs episodes on it ([`crate::cmd::replay`]).

use super::episode::{Episode, Reading, ReplayView};
use super::grid::{LegendEntry, legend_entries};
use crate::cmd::replay::{check_recorded_plugin, reference_of, replay_record, with_run_lock};
use crate::shared::plugins::load;
use crate::shared::run::new_env;
use crate::shared::sandbox::SandboxArgs;
use anyhow::Context;
use ragen_gym_sandbox::Plugin;
use ragen_gym_starpo::run_dir::TrajectoryRecord;
use std::path::Path;

/// The loaded plugin of a run and where it came from.
pub struct RunPlugin {
    /// The reference it was loaded from.
    pub reference: String,
    /// The plugin.
    pub plugin: Plugin,
    /// The sandbox flags it was loaded with (the run's lock applied).
    pub sandbox: SandboxArgs,
}

impl RunPlugin {
    /// The plugin that ran `first` (line `line` of `path`): `env` when given, else the recorded
    /// reference under the run directory's lock; refused unless its sha256 is the recorded one.
    pub fn load(
        run_dir: &Path,
        env: Option<&str>,
        sandbox: &SandboxArgs,
        (line, first, path): (usize, &TrajectoryRecord, &Path),
    ) -> anyhow::Result<Self> {
        let sandbox = with_run_lock(run_dir, sandbox, env.is_some());
        let reference = reference_of(env, first, line, path)?;
        let plugin = load(&reference, &sandbox)?;
        check_recorded_plugin(&plugin, &reference, first, line, path)?;
        Ok(Self {
            reference,
            plugin,
            sandbox,
        })
    }

    /// The plugin `first` names (or `env`), loaded without the run's lock or the sha256 check:
    /// for a legend when the plugin that ran is gone (a built-in that changed since), never for
    /// replay.
    pub fn load_unpinned(
        env: Option<&str>,
        sandbox: &SandboxArgs,
        (line, first, path): (usize, &TrajectoryRecord, &Path),
    ) -> anyhow::Result<Self> {
        let reference = reference_of(env, first, line, path)?;
        let plugin = load(&reference, sandbox)?;
        Ok(Self {
            reference,
            plugin,
            sandbox: sandbox.clone(),
        })
    }

    /// How to read the run's observations and responses, and the page's legend: from the spec
    /// of an env built with `first`'s recorded config.
    pub fn reading(
        &self,
        first: &TrajectoryRecord,
        action_sep: &str,
    ) -> anyhow::Result<(Reading, Vec<LegendEntry>)> {
        let config = first.env_config.clone().unwrap_or_default();
        let env = new_env(&self.plugin, &config, self.sandbox.grants()?).with_context(|| {
            format!(
                "failed to build env {} with config {config:?}",
                self.reference
            )
        })?;
        let spec = env.spec();
        let legend = legend_entries(spec.symbol_legend.as_deref().unwrap_or_default());
        let reading = Reading {
            symbols: legend
                .iter()
                .filter_map(|e| e.symbol.chars().next())
                .collect(),
            action_names: spec.action_names.clone(),
            action_sep: action_sep.to_string(),
        };
        Ok((reading, legend))
    }

    /// Replay the episodes of `path` on this plugin (only line `only` when given), recording
    /// the result on each replayed episode; returns how many replayed and diverged.
    pub fn replay(
        &self,
        path: &Path,
        episodes: &mut [Episode],
        only: Option<usize>,
    ) -> anyhow::Result<(usize, usize)> {
        let mut wanted: std::collections::BTreeMap<usize, &mut Episode> = episodes
            .iter_mut()
            .filter(|e| only.is_none_or(|n| n == e.line))
            .map(|e| (e.line, e))
            .collect();
        let mut records = Vec::new();
        super::load::for_each_record(path, |i, rec| {
            if wanted.contains_key(&i) {
                records.push((i, rec));
            }
            true
        })?;
        let mut diverged = 0;
        for (i, rec) in &records {
            check_recorded_plugin(&self.plugin, &self.reference, rec, *i, path)?;
            let view = match replay_record(&self.plugin, &self.reference, rec, &self.sandbox)? {
                Ok(_) => ReplayView::identical(),
                Err(d) => {
                    diverged += 1;
                    ReplayView::diverged(&d)
                }
            };
            if let Some(e) = wanted.get_mut(i) {
                e.replay = Some(view);
            }
        }
        Ok((records.len(), diverged))
    }
}
