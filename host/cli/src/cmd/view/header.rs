//! The page's header: what ran (env, model, the config's sha256, the plugins of the run's
//! `ragen-gym.lock`), how long (iterations) and how it went: the success curves of `ragen-gym
//! plot` (the same series, from the same metrics lines, [`crate::cmd::plot::series_of`]).

use super::grid::LegendEntry;
use super::load::{MAX_SMALL_BYTES, read_bounded, read_text};
use crate::cmd::plot::series_of;
use crate::report::curves::CURVES;
use anyhow::Context;
use ragen_gym_registry::{LOCK_FILE_NAME, LockFile};
use ragen_gym_starpo::RunInfo;
use serde::Serialize;
use std::path::Path;

/// A plugin of the lock file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginLine {
    /// `env` or `reward`.
    pub role: String,
    /// How it was named.
    pub reference: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Manifest id.
    pub id: String,
    /// Version.
    pub version: String,
}

/// One success series: `[iteration, value, stderr or null]` points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveLine {
    /// The metric (`val-env/SimpleSokoban/success`).
    pub name: String,
    /// Its points.
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// The header.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Header {
    /// The run directory as given.
    pub run: String,
    /// Env id and version (`run.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// The model the run started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// sha256 of `config.toml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// The locked plugins.
    pub plugins: Vec<PluginLine>,
    /// The last iteration of the metrics file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// The success curves.
    pub curves: Vec<CurveLine>,
    /// The trajectories file read.
    pub source: String,
    /// Trajectories it logged.
    pub logged: usize,
    /// The env's legend (empty: observations shown as text).
    pub legend: Vec<LegendEntry>,
    /// What the page could not show, and why.
    pub notes: Vec<String>,
}

/// sha256 of a file, hex.
fn file_sha256(path: &Path) -> anyhow::Result<String> {
    Ok(ragen_gym_sandbox::sha256_hex(&read_bounded(
        path,
        MAX_SMALL_BYTES,
    )?))
}

impl Header {
    /// What `run.json`, `config.toml` and `ragen-gym.lock` of `dir` say (each optional), and the
    /// success curves of `metrics`.
    pub fn read(dir: &Path, metrics: &[serde_json::Value]) -> anyhow::Result<Self> {
        let mut h = Header {
            run: dir.display().to_string(),
            ..Header::default()
        };
        let info = dir.join("run.json");
        if info.is_file() {
            let text = read_text(&info, MAX_SMALL_BYTES)?;
            let info: RunInfo = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a run.json", info.display()))?;
            h.env = Some(format!("{} {}", info.env_id, info.env_version));
            h.model = Some(info.model.display().to_string());
        }
        let config = dir.join("config.toml");
        if config.is_file() {
            h.config_sha256 = Some(file_sha256(&config)?);
        }
        let lock = dir.join(LOCK_FILE_NAME);
        if lock.is_file() {
            read_bounded(&lock, MAX_SMALL_BYTES)?;
            let lock = LockFile::read(&lock)?;
            h.plugins = lock
                .plugins
                .iter()
                .map(|p| PluginLine {
                    role: serde_json::to_value(p.role)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    reference: p.reference.clone(),
                    digest: p.digest.to_string(),
                    id: p.id.clone(),
                    version: p.version.clone(),
                })
                .collect();
        }
        h.iterations = metrics
            .iter()
            .filter_map(|l| l.get("iteration")?.as_u64())
            .max();
        let success = CURVES
            .iter()
            .find(|c| c.title == "Success rate")
            .expect("the success curve is one of CURVES");
        h.curves = series_of(success, metrics)
            .into_iter()
            .map(|s| CurveLine {
                name: s.name,
                points: s
                    .points
                    .iter()
                    .zip(&s.stderr)
                    .map(|(&(x, y), &e)| (x, y, e))
                    .collect(),
            })
            .collect();
        Ok(h)
    }
}
