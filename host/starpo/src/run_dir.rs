//! The run directory: resolved config, `metrics.jsonl`, `trajectories.jsonl`, `checkpoint/`.
//!
//! ```text
//! RUN_DIR/config.toml          the resolved config (what --resume reloads)
//! RUN_DIR/run.json             env id, plugin sha256, model path
//! RUN_DIR/metrics.jsonl        one JSON object per iteration (and per validation)
//! RUN_DIR/trajectories.jsonl   sample trajectories (seed, plugin hash, actions: re-runnable)
//! RUN_DIR/checkpoint/          the latest checkpoint, replaced atomically
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Run-directory I/O failures.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// A file could not be read or written.
    #[error("failed to access {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file had unexpected content.
    #[error("invalid {path}: {reason}")]
    Invalid {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Create (or open) `root`.
    pub fn create(root: &Path) -> Result<Self, RunDirError> {
        std::fs::create_dir_all(root).map_err(io(root))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
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

    /// Write a whole file atomically (temp file in the same directory, fsync, rename).
    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), RunDirError> {
        write_atomic(path, bytes)
    }

    /// Append one JSON object as a line to `path`, then flush and fsync.
    pub fn append_jsonl(&self, path: &Path, value: &serde_json::Value) -> Result<(), RunDirError> {
        let mut line = serde_json::to_string(value).map_err(|e| RunDirError::Invalid {
            path: path.into(),
            reason: e.to_string(),
        })?;
        line.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        f.write_all(line.as_bytes()).map_err(io(path))?;
        f.flush().map_err(io(path))?;
        f.sync_all().map_err(io(path))
    }

    /// Drop the lines of a JSONL file whose `iteration` is above `last` (entries written after
    /// the checkpoint a resumed run restarts from). Rewrites atomically; a missing file is fine.
    pub fn truncate_jsonl_after(&self, path: &Path, last: u64) -> Result<(), RunDirError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(RunDirError::Io {
                    path: path.into(),
                    source: e,
                });
            }
        };
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v.get("iteration").and_then(serde_json::Value::as_u64))
                    .is_some_and(|i| i <= last)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        write_atomic(path, kept.as_bytes())
    }

    /// Read every JSON line of `metrics.jsonl`.
    pub fn read_metrics(&self) -> Result<Vec<serde_json::Value>, RunDirError> {
        let path = self.metrics_path();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| RunDirError::Invalid {
                    path: path.clone(),
                    reason: format!("line {}: {e}", i + 1),
                })
            })
            .collect()
    }
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

    #[test]
    fn append_and_truncate_metrics() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        for i in 1..=4u64 {
            r.append_jsonl(
                &r.metrics_path(),
                &serde_json::json!({"iteration": i, "x": i * 2}),
            )
            .unwrap();
        }
        assert_eq!(r.read_metrics().unwrap().len(), 4);
        r.truncate_jsonl_after(&r.metrics_path(), 2).unwrap();
        let m = r.read_metrics().unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1]["x"], 4);
        r.write_atomic(&r.config_path(), b"a = 1").unwrap();
        assert_eq!(std::fs::read_to_string(r.config_path()).unwrap(), "a = 1");
    }
}
