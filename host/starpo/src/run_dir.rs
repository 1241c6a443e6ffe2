//! The run directory and its typed files.
//!
//! ```text
//! RUN_DIR/config.toml          the resolved config (what --resume reloads)
//! RUN_DIR/run.json             RunInfo: env id and version, plugin sha256 and source, model path
//! RUN_DIR/metrics.jsonl        one JSON object per iteration (and per validation before training)
//! RUN_DIR/trajectories.jsonl   one TrajectoryRecord a line: sample trajectories with the seed,
//!                              the steps and the plugin (re-runnable by `ragen-gym replay`)
//! RUN_DIR/events.out.tfevents.* TensorBoard scalars (written by the CLI's reporter)
//! RUN_DIR/checkpoint/          the latest checkpoint, replaced atomically; its
//!                              trainer_state.json is a TrainerState
//! RUN_DIR/.process.lock        held (an OS file lock) by the one process writing the run
//! ```
//!
//! The trainer writes `config.toml`, `run.json` and the checkpoint; reporters write the rest
//! from the trainer's events. Every whole-file write is atomic, and JSONL lines past the
//! checkpoint are dropped on resume ([`RunDir::truncate_jsonl_from`]), so a run that crashed
//! resumes into consistent files. An iteration's metrics line is written (and fsynced) before its
//! checkpoint, so every iteration a checkpoint covers has its line, and a resumed run writes
//! each later one again: `metrics.jsonl` holds every iteration exactly once.

use crate::config::{Config, ConfigBuilder, ConfigError};
use crate::events::Split;
use ragen_gym_core::Trajectory;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Run-directory I/O failures.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// A file could not be read or written.
    #[error("access {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file had unexpected content.
    #[error("read {path}: {reason}")]
    Invalid {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The directory does not exist (or is not a directory).
    #[error("{path} is not a run directory")]
    Missing {
        /// The path.
        path: PathBuf,
    },
}

/// The largest JSONL file of a run directory read whole (`metrics.jsonl`, `sft_metrics.jsonl`,
/// `trajectories.jsonl`): 1 GiB, far above what a run writes (a 60-iteration Sokoban run's
/// trajectories with every rollout logged are tens of MB), so a larger file is not ours.
pub const MAX_RUN_FILE_BYTES: u64 = 1 << 30;

/// The text of `path`, refused with [`RunDirError::Invalid`] naming it when it holds more than
/// `max` bytes (counted on the bytes read, not on the size the file system reports).
fn read_text_capped(path: &Path, max: u64) -> Result<String, RunDirError> {
    let bytes = read_bytes_capped(path, max)?;
    String::from_utf8(bytes).map_err(|e| RunDirError::Invalid {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 ({e})"),
    })
}

/// The bytes of `path`, refused with [`RunDirError::Invalid`] naming it when it holds more than
/// `max` (counted on the bytes read, not on the size the file system reports).
fn read_bytes_capped(path: &Path, max: u64) -> Result<Vec<u8>, RunDirError> {
    use std::io::Read;
    let file = File::open(path).map_err(io(path))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > max {
        return Err(RunDirError::Invalid {
            path: path.to_path_buf(),
            reason: format!("larger than {max} bytes, more than a run writes"),
        });
    }
    Ok(bytes)
}

/// The bytes of a JSONL file of the run (`None` when it does not exist), under
/// [`MAX_RUN_FILE_BYTES`]; bytes, not text, as a write cut short may end inside a character.
fn read_jsonl_bytes(path: &Path) -> Result<Option<Vec<u8>>, RunDirError> {
    match read_bytes_capped(path, MAX_RUN_FILE_BYTES) {
        Ok(b) => Ok(Some(b)),
        Err(RunDirError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A line of a JSONL file: its number (1-based), its bytes and its value, when it parses.
type JsonlLine<'a> = (usize, &'a [u8], Option<serde_json::Value>);

/// The lines of a JSONL file with their parsed values, without the lines after the last one
/// that parses (a torn append: lines are only appended, so a cut write can only be at the end)
/// and without blank lines. A line that does not parse with a whole line after it is damage, not
/// a crash's cut: [`RunDirError::Invalid`] naming the file and the line (1-based).
fn jsonl_lines<'a>(path: &Path, bytes: &'a [u8]) -> Result<Vec<JsonlLine<'a>>, RunDirError> {
    let lines: Vec<JsonlLine<'_>> = bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l, serde_json::from_slice(l).ok()))
        .collect();
    let Some(last_whole) = lines.iter().rposition(|(_, _, v)| v.is_some()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(last_whole + 1);
    for (n, line, value) in lines.into_iter().take(last_whole + 1) {
        if value.is_none() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Err(RunDirError::Invalid {
                path: path.to_path_buf(),
                reason: format!(
                    "line {n} is not JSON, yet whole lines follow it: the file is damaged, not \
                     cut short by a crash (only a last line is dropped); mend or delete that \
                     line to resume"
                ),
            });
        }
        out.push((n, line, value));
    }
    Ok(out)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The exclusive lock on a run directory ([`RunDir::lock`]): an advisory lock on
/// `RUN_DIR/.process.lock` that the OS drops when the process ends (`kill -9` included), so
/// one process at a time trains or fine-tunes a run. Dropping it releases the lock.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

/// `run.json`: what a run trains on, so `--resume` and `eval` can find it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The env's id (`ragen/Sokoban-v0`).
    pub env_id: String,
    /// The env's version.
    pub env_version: String,
    /// sha256 of the plugin file.
    pub plugin_sha256: String,
    /// How the plugin was named (`sokoban`, `path/to/env.wasm`).
    pub env_source: String,
    /// The model the run started from.
    pub model: PathBuf,
}

impl TrainerState {
    /// The largest iteration a checkpoint may record: far beyond any run, and far enough below
    /// `u32::MAX` that the trainer's iteration arithmetic (the next iteration, the end of a
    /// resumed run) cannot overflow.
    pub const MAX_ITERATION: u32 = 1_000_000_000;
}

/// `checkpoint/trainer_state.json`: where a resumed run continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Iterations completed when the checkpoint was written.
    pub iteration: u32,
    /// sha256 of the env plugin.
    pub plugin_sha256: String,
    /// The env's id.
    pub env_id: String,
    /// Where an `sft` run stands (absent in RL checkpoints and in those from before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sft: Option<SftProgress>,
}

/// An `sft` run's place in `checkpoint/trainer_state.json`: `sft --resume` continues from it
/// with the same learning rate, schedule and batch size (`train --resume` ignores it and starts
/// RL at iteration 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftProgress {
    /// Epochs completed.
    pub epoch: u32,
    /// The peak learning rate of its optimiser steps.
    pub lr: f64,
    /// Demonstrations per optimiser step.
    pub batch_size: usize,
    /// How the learning rate moves over the optimiser steps (constant in checkpoints written
    /// before `sft` had schedules).
    #[serde(default)]
    pub schedule: SftSchedule,
}

/// The learning-rate schedule of an `sft` run over all the optimiser steps of its `--epochs`:
/// a linear warm-up over `warmup_ratio` of them, then the peak rate held (`constant`) or
/// decayed along half a cosine to 0 at the last step (`cosine`), as
/// [`crate::update::schedule`] builds `train`'s (verl `optim.warmup_style`; Hugging Face
/// `transformers` `get_cosine_schedule_with_warmup`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SftSchedule {
    /// After the warm-up: held or decayed.
    pub style: crate::config::WarmupStyle,
    /// The share of the optimiser steps that warm up, in [0, 1].
    pub warmup_ratio: f64,
}

impl Default for SftSchedule {
    /// The peak rate from the first step to the last (what `sft` did before it had schedules).
    fn default() -> Self {
        Self {
            style: crate::config::WarmupStyle::Constant,
            warmup_ratio: 0.0,
        }
    }
}

/// One line of `trajectories.jsonl`: a trajectory (its fields at the top level) and what
/// `ragen-gym replay` needs besides its seed and steps to re-run it from this line alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryRecord {
    /// The trajectory.
    #[serde(flatten)]
    pub trajectory: Trajectory,
    /// The iteration whose rollout it comes from (0: validation before training, or `eval`).
    pub iteration: u32,
    /// The rollout it comes from.
    pub split: Split,
    /// Its training score (env rewards, format penalty, reward functions; before
    /// normalisation).
    pub score: f64,
    /// How the env plugin was named (`sokoban`, a path, a pinned URL, an `oci://` reference);
    /// absent in files written before replay existed.
    #[serde(default)]
    pub plugin: Option<String>,
    /// sha256 of the env plugin, hex.
    pub plugin_sha256: String,
    /// The env's JSON config (`env.config`); absent in files written before replay existed
    /// (the env's defaults).
    #[serde(default)]
    pub env_config: Option<String>,
    /// The in-group std of the trajectory's env group, the value the StarPO-S filter ranks
    /// ([`crate::filter::GroupVerdict`]); absent for validation and in files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_group_std: Option<f64>,
    /// Whether the StarPO-S filter kept the trajectory's group for the update; absent for
    /// validation and in files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_kept: Option<bool>,
}

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Create `root` (and its parents) if needed, for writing.
    pub fn create(root: &Path) -> Result<Self, RunDirError> {
        std::fs::create_dir_all(root).map_err(io(root))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Open an existing run directory for reading; a missing directory is an error.
    pub fn open(root: &Path) -> Result<Self, RunDirError> {
        if !root.is_dir() {
            return Err(RunDirError::Missing {
                path: root.to_path_buf(),
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// `.process.lock`: the file [`RunDir::lock`] locks (not `ragen-gym.lock`, the plugins'
    /// digests).
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(".process.lock")
    }

    /// Take the run directory's lock for as long as the returned [`RunLock`] lives.
    ///
    /// # Errors
    /// [`RunDirError::Invalid`] naming the lock file when another process holds it (two
    /// `train --resume` of one run wrote every later iteration twice);
    /// [`RunDirError::Io`] when it cannot be opened or locked.
    pub fn lock(&self) -> Result<RunLock, RunDirError> {
        let path = self.lock_path();
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => Ok(RunLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(RunDirError::Invalid {
                path,
                reason: "held by another process: another `train` or `sft` is writing this run \
                         directory"
                    .into(),
            }),
            // a file system without locks (std: `Unsupported`) still trains, unguarded
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                Ok(RunLock { _file: file })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(RunDirError::Io { path, source: e }),
        }
    }

    /// The root path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `metrics.jsonl`.
    pub fn metrics_path(&self) -> PathBuf {
        self.root.join("metrics.jsonl")
    }

    /// `sft_metrics.jsonl`: the per-epoch metrics of a run `ragen-gym sft` wrote.
    pub fn sft_metrics_path(&self) -> PathBuf {
        self.root.join("sft_metrics.jsonl")
    }

    /// `trajectories.jsonl`.
    pub fn trajectories_path(&self) -> PathBuf {
        self.root.join("trajectories.jsonl")
    }

    /// `checkpoint/`.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.root.join("checkpoint")
    }

    /// `run.json`.
    pub fn run_info_path(&self) -> PathBuf {
        self.root.join("run.json")
    }

    /// `checkpoint/trainer_state.json`: the file a resume starts from.
    pub fn trainer_state_path(&self) -> PathBuf {
        self.checkpoint_path().join("trainer_state.json")
    }

    /// Whether the checkpoint holds its `trainer_state.json`.
    pub fn has_checkpoint(&self) -> bool {
        self.trainer_state_path().exists()
    }

    /// The checkpoint's [`TrainerState`], or `None` when there is no checkpoint (none was
    /// written yet).
    ///
    /// # Errors
    /// [`RunDirError::Invalid`] naming `trainer_state.json` when `checkpoint/` exists without it
    /// (a checkpoint is renamed into place whole, so files were removed), or as
    /// [`RunDir::read_trainer_state`].
    pub fn checkpoint_state(&self) -> Result<Option<TrainerState>, RunDirError> {
        if self.has_checkpoint() {
            return self.read_trainer_state().map(Some);
        }
        if self.checkpoint_path().exists() {
            return Err(RunDirError::Invalid {
                path: self.trainer_state_path(),
                reason: "missing from the checkpoint (it is written whole, so files were \
                         removed): restore it, or move checkpoint/ away to start again from the \
                         model"
                    .into(),
            });
        }
        Ok(None)
    }

    /// Write the resolved config to `config.toml`.
    pub fn write_config(&self, cfg: &Config) -> Result<(), RunDirError> {
        write_atomic(&self.config_path(), cfg.to_toml().as_bytes())
    }

    /// The run's own config as the base of a resumed run's layers.
    pub fn resume_config(&self) -> Result<ConfigBuilder, ConfigError> {
        ConfigBuilder::new().layer_file(&self.config_path())
    }

    /// Write `run.json`.
    pub fn write_run_info(&self, info: &RunInfo) -> Result<(), RunDirError> {
        let path = self.run_info_path();
        let text = serde_json::to_string_pretty(info).map_err(|e| RunDirError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&path, text.as_bytes())
    }

    /// Read `run.json`.
    pub fn read_run_info(&self) -> Result<RunInfo, RunDirError> {
        read_json(&self.run_info_path())
    }

    /// Read the checkpoint's `trainer_state.json`; an iteration over
    /// [`TrainerState::MAX_ITERATION`] is refused.
    pub fn read_trainer_state(&self) -> Result<TrainerState, RunDirError> {
        let path = self.trainer_state_path();
        let state: TrainerState = read_json(&path)?;
        if state.iteration > TrainerState::MAX_ITERATION {
            return Err(RunDirError::Invalid {
                path,
                reason: format!(
                    "iteration {} is over the limit of {}",
                    state.iteration,
                    TrainerState::MAX_ITERATION
                ),
            });
        }
        Ok(state)
    }

    /// The highest `iteration` of a line of `metrics.jsonl` (`None` without such a line or
    /// without the file): how far a run had got. A last line a crash cut short is skipped; a
    /// damaged line before the end is refused ([`RunDir::truncate_jsonl_from`]'s rule).
    pub fn last_logged_iteration(&self) -> Result<Option<u64>, RunDirError> {
        let path = self.metrics_path();
        let Some(bytes) = read_jsonl_bytes(&path)? else {
            return Ok(None);
        };
        Ok(jsonl_lines(&path, &bytes)?
            .into_iter()
            .filter_map(|(_, _, v)| v?.get("iteration")?.as_u64())
            .max())
    }

    /// Refuse to continue this run on another env: `run.json` and the checkpoint's
    /// `trainer_state.json` (each where present) must name the plugin digest `plugin_sha256` and
    /// the env id `env_id` the resumed run has loaded. `source` is how that plugin was named.
    ///
    /// # Errors
    /// [`RunDirError::Invalid`] naming the file, what it records and what was loaded;
    /// [`RunDirError::Io`]/[`RunDirError::Invalid`] when a present file cannot be read.
    pub fn check_same_env(
        &self,
        plugin_sha256: &str,
        env_id: &str,
        source: &str,
    ) -> Result<(), RunDirError> {
        let state_path = self.trainer_state_path();
        let mut recorded = Vec::new();
        if self.run_info_path().exists() {
            let info = self.read_run_info()?;
            recorded.push((self.run_info_path(), info.plugin_sha256, info.env_id));
        }
        if state_path.exists() {
            let state = self.read_trainer_state()?;
            recorded.push((state_path, state.plugin_sha256, state.env_id));
        }
        for (path, sha, id) in recorded {
            if sha != plugin_sha256 || id != env_id {
                return Err(RunDirError::Invalid {
                    path,
                    reason: format!(
                        "the run was trained on {id} (plugin sha256 {sha}), but the plugin \
                         given now ({source}) is {env_id} (sha256 {plugin_sha256}): a run \
                         continues on the env it was trained on (pass that plugin with --env, \
                         or start a new run)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Open a JSONL file for appending whole lines.
    pub fn jsonl_writer(&self, path: &Path) -> Result<JsonlWriter, RunDirError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        Ok(JsonlWriter {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// Drop the lines of a JSONL file whose `iteration` is `first` or above (entries written
    /// after the checkpoint a resumed run restarts from, which it writes again), and the lines
    /// after the last line that parses (a write cut short by a crash: lines are only appended, so
    /// a torn write can only be at the end). Rewrites atomically; a missing file is fine.
    ///
    /// # Errors
    /// [`RunDirError::Invalid`] naming the file and line when a line that does not parse has a
    /// whole line after it (the file was damaged, not cut short: dropping it would lose an
    /// iteration silently), or when the file is over [`MAX_RUN_FILE_BYTES`].
    pub fn truncate_jsonl_from(&self, path: &Path, first: u64) -> Result<(), RunDirError> {
        let Some(bytes) = read_jsonl_bytes(path)? else {
            return Ok(());
        };
        let lines = jsonl_lines(path, &bytes)?;
        let mut kept = Vec::with_capacity(bytes.len());
        for (_, line, value) in lines {
            let keep = value
                .and_then(|v| v.get("iteration").and_then(serde_json::Value::as_u64))
                .is_some_and(|it| it < first);
            if keep {
                kept.extend_from_slice(line);
                kept.push(b'\n');
            }
        }
        write_atomic(path, &kept)
    }

    /// Check, writing nothing, that a resume from the checkpoint of iteration `done` can
    /// truncate `metrics.jsonl` and `trajectories.jsonl` ([`RunDir::truncate_jsonl_from`])
    /// without losing a line silently: no damaged line, every line with a whole-number
    /// `iteration` (the trainer's lines all have one), and `metrics.jsonl` holding each of the
    /// iterations 1..=`done` the checkpoint covers (each was written and fsynced before its
    /// checkpoint, so a missing one was cut or removed). Run before a resumed run rewrites any
    /// file, so a refusal leaves the run directory as it was. A file that does not exist is
    /// not checked.
    ///
    /// # Errors
    /// [`RunDirError::Invalid`] naming the file and the line or the missing iterations; read
    /// errors as [`RunDir::truncate_jsonl_from`].
    pub fn check_jsonl_resumable(&self, done: u64) -> Result<(), RunDirError> {
        for path in [self.metrics_path(), self.trajectories_path()] {
            let Some(bytes) = read_jsonl_bytes(&path)? else {
                continue;
            };
            let invalid = |reason: String| RunDirError::Invalid {
                path: path.clone(),
                reason,
            };
            let mut seen = std::collections::BTreeSet::new();
            for (n, _, value) in jsonl_lines(&path, &bytes)? {
                let it = value
                    .as_ref()
                    .and_then(|v| v.get("iteration"))
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| {
                        invalid(format!(
                            "line {n} has no whole-number \"iteration\" (every line the \
                             trainer writes has one): mend or delete it to resume"
                        ))
                    })?;
                seen.insert(it);
            }
            if path == self.metrics_path() {
                let missing: Vec<String> = (1..=done)
                    .filter(|k| !seen.contains(k))
                    .map(|k| k.to_string())
                    .collect();
                if !missing.is_empty() {
                    return Err(invalid(format!(
                        "no line for iteration {} of the {done} its checkpoint covers (each is \
                         written before its checkpoint, so a line was cut or removed): restore \
                         it, or delete the file to resume without the earlier metrics",
                        missing.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Read `trajectories.jsonl`: each record with its line number (0-based; blank lines are
    /// skipped but counted), or only line `only` when given.
    pub fn read_trajectories(
        &self,
        only: Option<usize>,
    ) -> Result<Vec<(usize, TrajectoryRecord)>, RunDirError> {
        read_trajectory_records(&self.trajectories_path(), only)
    }

    /// Read every JSON line of `metrics.jsonl`.
    pub fn read_metrics(&self) -> Result<Vec<serde_json::Value>, RunDirError> {
        read_jsonl(&self.metrics_path())
    }
}

/// Every JSON line of the JSONL file at `path` (`metrics.jsonl`, `sft_metrics.jsonl`), refused
/// past [`MAX_RUN_FILE_BYTES`].
pub fn read_jsonl(path: &Path) -> Result<Vec<serde_json::Value>, RunDirError> {
    read_jsonl_capped(path, MAX_RUN_FILE_BYTES)
}

/// Every JSON line of `path`, refused when it holds more than `max` bytes.
fn read_jsonl_capped(path: &Path, max: u64) -> Result<Vec<serde_json::Value>, RunDirError> {
    let text = read_text_capped(path, max)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| RunDirError::Invalid {
                path: path.to_path_buf(),
                reason: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// Appends JSON objects to a JSONL file, one whole line each, keys in sorted order;
/// [`JsonlWriter::sync`] makes them durable.
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlWriter {
    /// Append one value as a line (buffered): a JSON object, such as a [`TrajectoryRecord`] or
    /// a `metrics.jsonl` entry.
    pub fn write<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), RunDirError> {
        let invalid = |e: serde_json::Error| RunDirError::Invalid {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        // through a `Value`, whose map sorts its keys
        let value = serde_json::to_value(value).map_err(invalid)?;
        let mut line = serde_json::to_string(&value).map_err(invalid)?;
        line.push('\n');
        self.out.write_all(line.as_bytes()).map_err(io(&self.path))
    }

    /// Flush the buffer and fsync the file.
    pub fn sync(&mut self) -> Result<(), RunDirError> {
        self.out.flush().map_err(io(&self.path))?;
        self.out.get_ref().sync_all().map_err(io(&self.path))
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, RunDirError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|e| RunDirError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Read a file of [`TrajectoryRecord`] lines (`trajectories.jsonl`, `demonstrations.jsonl`, or
/// one from elsewhere): each record with its line number (0-based; blank lines are skipped but
/// counted), or only line `only` when given.
///
/// # Errors
/// [`RunDirError::Io`] or [`RunDirError::Invalid`] naming the file and the line.
pub fn read_trajectory_records(
    path: &Path,
    only: Option<usize>,
) -> Result<Vec<(usize, TrajectoryRecord)>, RunDirError> {
    let text = read_text_capped(path, MAX_RUN_FILE_BYTES)?;
    text.lines()
        .enumerate()
        .filter(|(i, l)| !l.trim().is_empty() && only.is_none_or(|n| n == *i))
        .map(|(i, l)| {
            let record = serde_json::from_str(l).map_err(|e| RunDirError::Invalid {
                path: path.to_path_buf(),
                reason: format!("line {i}: {e}"),
            })?;
            Ok((i, record))
        })
        .collect()
}

/// Write `bytes` to `path` atomically: `path.tmp`, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunDirError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint written before `sft` had schedules (a `trainer_state.json` whose `sft` has no
    /// `schedule` key) reads as the constant rate it ran with; a new one round-trips its cosine.
    #[test]
    fn an_sft_checkpoint_without_a_schedule_is_a_constant_rate() {
        let old = r#"{"iteration": 0, "plugin_sha256": "ab", "env_id": "ragen/Sokoban-v0",
                      "sft": {"epoch": 7, "lr": 0.001, "batch_size": 4}}"#;
        let state: TrainerState = serde_json::from_str(old).unwrap();
        assert_eq!(
            state.sft,
            Some(SftProgress {
                epoch: 7,
                lr: 1e-3,
                batch_size: 4,
                schedule: SftSchedule {
                    style: crate::config::WarmupStyle::Constant,
                    warmup_ratio: 0.0,
                },
            })
        );
        let cosine = SftProgress {
            schedule: SftSchedule {
                style: crate::config::WarmupStyle::Cosine,
                warmup_ratio: 0.05,
            },
            ..state.sft.clone().unwrap()
        };
        let text = serde_json::to_string(&cosine).unwrap();
        assert!(text.contains(r#""style":"cosine""#), "{text}");
        assert_eq!(serde_json::from_str::<SftProgress>(&text).unwrap(), cosine);
    }

    /// A JSONL file is read up to the cap and refused, naming it, one byte past it: two lines
    /// of 9 bytes each (`{"a": 1}` and a newline) pass a cap of 18 and fail a cap of 17.
    #[test]
    fn a_run_file_over_the_cap_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("metrics.jsonl");
        std::fs::write(&path, "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
        let lines = read_jsonl_capped(&path, 18).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["a"], 2);
        let err = read_jsonl_capped(&path, 17).unwrap_err().to_string();
        assert!(
            err.contains("metrics.jsonl") && err.contains("larger than 17 bytes"),
            "{err}"
        );
        std::fs::write(&path, [0xffu8, b'\n']).unwrap();
        let err = read_jsonl_capped(&path, 18).unwrap_err().to_string();
        assert!(err.contains("not UTF-8"), "{err}");
    }

    #[test]
    fn append_and_truncate_metrics() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        let mut w = r.jsonl_writer(&r.metrics_path()).unwrap();
        for i in 1..=4u64 {
            w.write(&serde_json::json!({"iteration": i, "x": i * 2}))
                .unwrap();
        }
        w.sync().unwrap();
        drop(w);
        // a line cut short by a crash, inside a two-byte character
        std::fs::OpenOptions::new()
            .append(true)
            .open(r.metrics_path())
            .unwrap()
            .write_all(b"{\"iteration\": 1, \"x\": \"\xc3")
            .unwrap();
        r.truncate_jsonl_from(&r.metrics_path(), 3).unwrap();
        let m = r.read_metrics().unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1]["x"], 4);
    }

    #[test]
    fn a_resume_check_refuses_lines_it_would_drop_silently() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        // no files: nothing to check
        r.check_jsonl_resumable(3).unwrap();
        let it = |i: u64| format!("{{\"iteration\": {i}}}\n");
        let metrics = |text: String| std::fs::write(r.metrics_path(), text).unwrap();
        let err = |done| r.check_jsonl_resumable(done).unwrap_err().to_string();
        // the checkpoint's iterations present (and 0, and one past it, and a torn end): fine
        metrics(format!(
            "{}{}{}{}{}{{\"iter",
            it(0),
            it(1),
            it(2),
            it(3),
            it(4)
        ));
        r.check_jsonl_resumable(3).unwrap();
        // a line cut out (a NUL-ed or deleted line 2): refused naming the iteration
        metrics(format!("{}{}", it(1), it(3)));
        let e = err(3);
        assert!(
            e.contains("metrics.jsonl") && e.contains("no line for iteration 2 of the 3"),
            "{e}"
        );
        assert!(r.check_jsonl_resumable(1).is_ok());
        // whole JSON without a whole-number iteration: refused by line (1-based)
        for bad in [
            "{\"foo\": 1}",
            "{\"iteration\": \"2\"}",
            "{\"iteration\": 1e30}",
        ] {
            metrics(format!("{}{bad}\n{}", it(1), it(2)));
            let e = err(2);
            assert!(
                e.contains("line 2 has no whole-number \"iteration\""),
                "{bad}: {e}"
            );
        }
        metrics(format!("{}{}", it(1), it(2)));
        std::fs::write(r.trajectories_path(), format!("\n{}[]\n", it(1))).unwrap();
        let e = err(2);
        assert!(
            e.contains("trajectories.jsonl") && e.contains("line 3 has no whole-number"),
            "{e}"
        );
    }

    #[test]
    fn truncation_drops_a_torn_end_and_refuses_damage_before_it() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        let path = r.metrics_path();
        let whole = |i: u64| format!("{{\"iteration\": {i}}}\n");
        // everything after the last whole line is a torn write: a cut line, then zeros (what a
        // file system may show of blocks allocated but never written)
        let torn = format!("{}{}{{\"iteration\": 3, \"x\n\0\0\0", whole(1), whole(2));
        std::fs::write(&path, torn).unwrap();
        r.truncate_jsonl_from(&path, 5).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            whole(1) + &whole(2)
        );
        // a garbled line with whole lines after it (lines 2 of 4): damage, refused by line,
        // and the file left as it was
        let damaged = format!("{}garbage\n\n{}", whole(1), whole(2));
        std::fs::write(&path, &damaged).unwrap();
        let e = r.truncate_jsonl_from(&path, 5).unwrap_err().to_string();
        assert!(
            e.contains("metrics.jsonl") && e.contains("line 2 is not JSON"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), damaged);
        // blank lines anywhere are no damage
        std::fs::write(&path, format!("\n{}\n  \n{}", whole(1), whole(2))).unwrap();
        r.truncate_jsonl_from(&path, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole(1));
    }

    #[test]
    fn typed_files_round_trip_and_open_needs_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        assert_eq!(
            RunDir::open(&missing).unwrap_err().to_string(),
            format!("{} is not a run directory", missing.display())
        );
        assert!(!missing.exists(), "open must not create the directory");
        let r = RunDir::create(&d.path().join("run")).unwrap();
        let info = RunInfo {
            env_id: "ragen/Bandit-v0".into(),
            env_version: "0.1.0".into(),
            plugin_sha256: "ab".into(),
            env_source: "bandit".into(),
            model: PathBuf::from("m.gguf"),
        };
        r.write_run_info(&info).unwrap();
        let r = RunDir::open(r.root()).unwrap();
        assert_eq!(r.read_run_info().unwrap(), info);
        let cfg = Config::default_config();
        r.write_config(&cfg).unwrap();
        assert_eq!(r.resume_config().unwrap().build().unwrap(), cfg);
        std::fs::create_dir_all(r.checkpoint_path()).unwrap();
        std::fs::write(
            r.checkpoint_path().join("trainer_state.json"),
            r#"{"iteration": 3, "plugin_sha256": "ab", "env_id": "x"}"#,
        )
        .unwrap();
        assert_eq!(r.read_trainer_state().unwrap().iteration, 3);
        // an iteration near u32::MAX made the trainer's `iteration + 1` overflow (a panic)
        for (it, ok) in [
            (1_000_000_000u32, true),
            (1_000_000_001, false),
            (u32::MAX, false),
        ] {
            std::fs::write(
                r.checkpoint_path().join("trainer_state.json"),
                format!(r#"{{"iteration": {it}, "plugin_sha256": "ab", "env_id": "x"}}"#),
            )
            .unwrap();
            match r.read_trainer_state() {
                Ok(s) => assert!(ok && s.iteration == it, "{it}"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(!ok, "{it}: {e}");
                    assert!(
                        e.contains("trainer_state.json")
                            && e.contains(&format!(
                                "iteration {it} is over the limit of 1000000000"
                            )),
                        "{e}"
                    );
                }
            }
        }
        std::fs::write(r.run_info_path(), "{}").unwrap();
        let e = r.read_run_info().unwrap_err().to_string();
        assert!(e.contains("run.json") && e.contains("env_id"), "{e}");
    }

    fn trajectory() -> Trajectory {
        let step = ragen_gym_core::Step {
            action: "Up".into(),
            outcome: Ok(ragen_gym_core::StepResult {
                observation: "#P#".into(),
                reward: -0.1,
                terminated: false,
                truncated: false,
                action_is_valid: true,
                action_is_effective: true,
                success: false,
                info: vec![],
            }),
            expert: None,
        };
        Trajectory {
            env_id: "ragen/Sokoban-v0".into(),
            tag: "Sokoban".into(),
            group: 1,
            seed: 10001,
            turns: vec![ragen_gym_core::Turn {
                observation: "#_P#".into(),
                actions_left: 9,
                response: "<answer>Up</answer>".into(),
                think: None,
                answer: Some("Up".into()),
                actions: vec!["Up".into()],
                env_reward: -0.1,
                action_is_valid: true,
                action_is_effective: true,
                format_penalty: false,
                info: vec![],
                steps: vec![step],
                sampled: None,
            }],
            final_observation: "#P#".into(),
            num_actions: 1,
            terminated: false,
            truncated: true,
            success: false,
            penalty: 0.0,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    #[test]
    fn trajectory_records_keep_the_line_format_and_read_older_lines() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        let t = trajectory();
        let record = TrajectoryRecord {
            trajectory: t.clone(),
            iteration: 5,
            split: Split::Train,
            score: t.score(),
            plugin: Some("sokoban".into()),
            plugin_sha256: "ab12".into(),
            env_config: Some(r#"{"dim_room":[6,6]}"#.into()),
            in_group_std: Some(0.5),
            filter_kept: Some(true),
        };
        let mut w = r.jsonl_writer(&r.trajectories_path()).unwrap();
        w.write(&record).unwrap();
        w.sync().unwrap();
        drop(w);
        // the line a writer of untyped JSON wrote: the trajectory's fields plus six keys, sorted
        let mut old = serde_json::to_value(&t).unwrap();
        let o = old.as_object_mut().unwrap();
        o.insert("iteration".into(), 5.into());
        o.insert("split".into(), "train".into());
        o.insert("plugin".into(), "sokoban".into());
        o.insert("plugin_sha256".into(), "ab12".into());
        o.insert("env_config".into(), r#"{"dim_room":[6,6]}"#.into());
        o.insert("score".into(), t.score().into());
        o.insert("in_group_std".into(), 0.5.into());
        o.insert("filter_kept".into(), true.into());
        let text = std::fs::read_to_string(r.trajectories_path()).unwrap();
        assert_eq!(text, format!("{}\n", serde_json::to_string(&old).unwrap()));
        // a line from before replay (no plugin, no env_config, no filter verdict) after a blank
        // line
        let o = old.as_object_mut().unwrap();
        for key in ["plugin", "env_config", "in_group_std", "filter_kept"] {
            o.remove(key);
        }
        o.insert("split".into(), "val".into());
        let older = format!("{text}\n{}\n", serde_json::to_string(&old).unwrap());
        std::fs::write(r.trajectories_path(), older).unwrap();
        let read = r.read_trajectories(None).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0], (0, record));
        let (line, rec) = &read[1];
        assert_eq!(*line, 2);
        assert_eq!(
            (rec.split, &rec.plugin, &rec.env_config),
            (Split::Val, &None, &None)
        );
        assert_eq!((rec.in_group_std, rec.filter_kept), (None, None));
        assert_eq!(rec.trajectory, t);
        assert_eq!(r.read_trajectories(Some(2)).unwrap().len(), 1);
        assert!(r.read_trajectories(Some(1)).unwrap().is_empty());
        // a line that is not a record names the file and the line
        std::fs::write(r.trajectories_path(), "{}\n").unwrap();
        let e = r.read_trajectories(None).unwrap_err().to_string();
        assert!(
            e.contains("trajectories.jsonl") && e.contains("line 0"),
            "{e}"
        );
    }
}
