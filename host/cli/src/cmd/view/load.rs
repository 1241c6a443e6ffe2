//! Reading a run directory for the page, bounded: the trajectories file is streamed a line at a
//! time under a cap on the file and on each line, the metrics file is read under its own cap, and
//! every error names the file (and the line).

use super::episode::{Episode, Reading};
use anyhow::Context;
use ragen_gym_starpo::run_dir::TrajectoryRecord;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The largest trajectories file read (1 GiB).
pub const MAX_TRAJECTORIES_BYTES: u64 = 1 << 30;
/// The largest line of a trajectories file (64 MiB).
pub const MAX_LINE_BYTES: u64 = 64 << 20;
/// The largest metrics file read (64 MiB).
pub const MAX_METRICS_BYTES: u64 = 64 << 20;
/// The largest small file read (`run.json`, `config.toml`, `ragen-gym.lock`): 1 MiB.
pub const MAX_SMALL_BYTES: u64 = 1 << 20;

/// The first of `names` in `dir` that exists (`train` writes `trajectories.jsonl`, `sft`
/// `sft_trajectories.jsonl`).
pub fn first_existing(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// `path`'s bytes, refusing a file larger than `cap`.
pub fn read_bounded(path: &Path, cap: u64) -> anyhow::Result<Vec<u8>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("failed to read {}", path.display()))?;
    anyhow::ensure!(
        bytes.len() as u64 <= cap,
        "{} is larger than {cap} bytes, the most `view` reads",
        path.display()
    );
    Ok(bytes)
}

/// `path` as UTF-8 text, at most `cap` bytes.
pub fn read_text(path: &Path, cap: u64) -> anyhow::Result<String> {
    String::from_utf8(read_bounded(path, cap)?)
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// Call `each` with every record of the trajectories file `path` and its line number (0-based,
/// blank lines counted, as `replay --trajectory N` numbers them) until it returns `false`.
pub fn for_each_record(
    path: &Path,
    mut each: impl FnMut(usize, TrajectoryRecord) -> bool,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    anyhow::ensure!(
        size <= MAX_TRAJECTORIES_BYTES,
        "{} has {size} bytes, more than the {MAX_TRAJECTORIES_BYTES} `view` reads",
        path.display()
    );
    let mut reader = BufReader::new(file.take(MAX_TRAJECTORIES_BYTES));
    let mut line = Vec::new();
    for i in 0.. {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("failed to read {} line {i}", path.display()))?;
        if n == 0 {
            break;
        }
        anyhow::ensure!(
            n as u64 <= MAX_LINE_BYTES,
            "{} line {i} is longer than {MAX_LINE_BYTES} bytes",
            path.display()
        );
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let rec: TrajectoryRecord = serde_json::from_slice(&line)
            .with_context(|| format!("{} line {i} is not a trajectory record", path.display()))?;
        if !each(i, rec) {
            break;
        }
    }
    Ok(())
}

/// The first record of `path`, if it has one.
pub fn first_record(path: &Path) -> anyhow::Result<Option<TrajectoryRecord>> {
    let mut first = None;
    for_each_record(path, |_, rec| {
        first = Some(rec);
        false
    })?;
    Ok(first)
}

/// Every episode of `path`, read as `reading` says.
pub fn episodes(path: &Path, reading: &Reading) -> anyhow::Result<Vec<Episode>> {
    let mut out = Vec::new();
    for_each_record(path, |i, rec| {
        out.push(Episode::new(i, &rec, reading));
        true
    })?;
    Ok(out)
}

/// The JSON objects of a metrics file (blank lines skipped), each error naming the line.
pub fn metrics(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = read_text(path, MAX_METRICS_BYTES)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {} is not JSON", path.display(), i + 1))
        })
        .collect()
}
