//! `kill -9` at any moment: `ragen-gym train` on the Bandit and a tiny random model is killed
//! (SIGKILL) 20 times, each time in one phase of an iteration (rollout, update, checkpoint write,
//! metrics write), and resumed with `--resume` until it finishes. After every kill the files must
//! hold each iteration once, with a line for every iteration the checkpoint covers and at most one
//! past it (the one iteration a kill may lose); the finished run's files must hold each iteration
//! exactly once (metrics.jsonl and TensorBoard), and its final checkpoint must equal, byte for
//! byte, that of the same run never interrupted (runs are deterministic).
//!
//! Cost: 22 short `train` processes on a 2-layer model: 40 to 71 s on the shared 2-core machine
//! under a load of 5 to 6.

use crate::child::cli;
use crate::tiny_model;
use ragen_gym_cli::report::tensorboard::{event_files, read_events, scalars};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Iterations of the run.
const ITERATIONS: u32 = 12;
/// Kills before the run may finish.
const KILLS: usize = 20;
/// No process of this test may run longer.
const LIMIT: Duration = Duration::from_secs(120);

/// Where a kill is aimed: after the progress line that opens the phase, a random delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Rollout,
    Update,
    Checkpoint,
    /// The summary line is printed just before the JSONL and TensorBoard writes.
    Metrics,
}

impl Target {
    const ALL: [Self; 4] = [Self::Rollout, Self::Update, Self::Checkpoint, Self::Metrics];

    /// Whether `line` (of the child's stderr) opens this phase of iteration `it`.
    fn opens(self, line: &str, it: u32) -> bool {
        let phase = |name: &str| line.starts_with(&format!("iteration {it}/{ITERATIONS}: {name} "));
        match self {
            Self::Rollout => phase("rollout"),
            Self::Update => phase("update"),
            Self::Checkpoint => phase("checkpoint"),
            Self::Metrics => line.starts_with(&format!("iteration {it}: ")) && line.contains('='),
        }
    }
}

/// `train` for a fresh run into `run_dir`: the Bandit's CPU preset, shrunk, with a checkpoint
/// after every iteration.
fn fresh_args(model: &Path, run_dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = ["train", "--env", "bandit", "--device", "cpu"]
        .map(String::from)
        .into();
    a.extend(["--model".into(), model.display().to_string()]);
    a.extend(["--run-dir".into(), run_dir.display().to_string()]);
    a.extend(["--iterations".into(), ITERATIONS.to_string()]);
    for s in [
        "trainer.save_freq=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=true",
        "es_manager.train.env_groups=4",
        "es_manager.train.group_size=2",
        "es_manager.val.env_groups=4",
        "actor.ppo_mini_batch_size=2",
    ] {
        a.extend(["--set".into(), s.into()]);
    }
    a
}

fn resume_args(run_dir: &Path) -> Vec<String> {
    vec![
        "train".into(),
        "--device".into(),
        "cpu".into(),
        "--resume".into(),
        run_dir.display().to_string(),
    ]
}

/// A `train` process whose stderr lines arrive on a channel, with their time.
struct Running {
    child: std::process::Child,
    lines: mpsc::Receiver<(Instant, String)>,
    started: Instant,
}

fn spawn(args: &[String]) -> Running {
    let mut child = Command::new(cli())
        .args(args)
        .env("RAGEN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ragen-gym");
    let started = Instant::now();
    let (tx, lines) = mpsc::channel();
    let err = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), l)).is_err() {
                break;
            }
        }
    });
    Running {
        child,
        lines,
        started,
    }
}

impl Running {
    /// The next stderr line, or `None` once the process closed stderr.
    fn next_line(&self) -> Option<(Instant, String)> {
        let left = LIMIT.saturating_sub(self.started.elapsed());
        match self.lines.recv_timeout(left) {
            Ok(l) => Some(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("train ran past {LIMIT:?}"),
        }
    }

    /// Wait for the exit; the stderr lines not read yet.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let mut rest = Vec::new();
        while let Some((_, l)) = self.next_line() {
            rest.push(l);
        }
        (self.child.wait().unwrap(), rest)
    }
}

/// The iterations of the complete lines of `metrics.jsonl` (a line cut short is not one).
fn metric_iterations(run_dir: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["iteration"].as_u64().expect("iteration"))
        .collect()
}

/// The iteration of the checkpoint a resume would load (0: none yet).
fn checkpoint_iteration(run_dir: &Path) -> u64 {
    let ckpt = run_dir.join("checkpoint");
    // what `--resume` does first: put back a checkpoint a kill left renamed
    ragen_gym_policy::recover_interrupted(&ckpt).unwrap();
    match ragen_gym_policy::read_trainer_state(&ckpt) {
        Ok(v) => v["iteration"].as_u64().unwrap(),
        Err(_) => {
            assert!(!ckpt.join("trainer_state.json").exists());
            0
        }
    }
}

/// The metrics of a finished run by iteration, without the wall times and `sandbox/fuel_used`:
/// the env pool keeps its plugin instances from one iteration to the next, and a fresh instance
/// pays for its lazy start-up, so an iteration that is the first of its process counts more fuel
/// (264 units on the Bandit) with the same rollouts.
fn metrics_without_timings(run_dir: &Path) -> BTreeMap<u64, serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.retain(|k, _| !k.starts_with("timing_s/") && k != "sandbox/fuel_used");
            (o["iteration"].as_u64().unwrap(), v)
        })
        .collect()
}

/// `(iteration, metric, resumed, uninterrupted)` for every metric the two runs disagree on.
fn metric_differences(
    resumed: &BTreeMap<u64, serde_json::Value>,
    uninterrupted: &BTreeMap<u64, serde_json::Value>,
) -> Vec<(u64, String, String, String)> {
    let mut out = Vec::new();
    for (it, b) in uninterrupted {
        let null = serde_json::Value::Null;
        let a = resumed.get(it).unwrap_or(&null);
        let (ao, bo) = (a.as_object(), b.as_object().unwrap());
        let keys: std::collections::BTreeSet<&String> = bo
            .keys()
            .chain(ao.into_iter().flat_map(|o| o.keys()))
            .collect();
        for k in keys {
            let (x, y) = (&a[k.as_str()], &b[k.as_str()]);
            if x != y {
                out.push((*it, k.clone(), x.to_string(), y.to_string()));
            }
        }
    }
    out
}

/// Every file of the final checkpoint (weights, adapters, optimiser states, trainer state).
fn checkpoint_files(run_dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    let root = run_dir.join("checkpoint");
    walk(&root, &root, &mut out);
    out
}

/// splitmix64 (`ragen_gym_core::splitmix64`): the kill schedule's random numbers, fixed by seed.
fn next(state: &mut u64) -> u64 {
    ragen_gym_core::splitmix64(state)
}

#[test]
fn kill_9_at_any_phase_then_resume_gives_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let reference = dir.path().join("reference");
    let killed = dir.path().join("killed");

    let t = Instant::now();
    let (status, err) = spawn(&fresh_args(&model, &reference)).finish();
    assert!(
        status.success(),
        "uninterrupted run failed: {status}\n{}",
        err.join("\n")
    );
    let uninterrupted = t.elapsed();

    let mut rng = 0x9e37_79b9_u64;
    let mut landed: BTreeMap<&'static str, usize> = BTreeMap::new();
    let (mut lost, mut resume_startup) = (Vec::new(), Vec::new());
    for k in 0..KILLS {
        let ckpt = checkpoint_iteration(&killed);
        let args = if k == 0 {
            fresh_args(&model, &killed)
        } else {
            resume_args(&killed)
        };
        // every other kill lets one iteration finish first, so the run moves on
        let it = (ckpt as u32 + 1 + (k as u32 % 2)).min(ITERATIONS);
        let target = Target::ALL[(next(&mut rng) % 4) as usize];
        // the metrics write takes well under a millisecond: aim within one
        let spread = if target == Target::Metrics {
            1_000
        } else {
            20_000
        };
        let delay = Duration::from_micros(next(&mut rng) % spread);
        let run = spawn(&args);
        let mut last_line = String::new();
        while let Some((at, line)) = run.next_line() {
            if line.starts_with("training iterations") && k > 0 {
                resume_startup.push(at - run.started);
            }
            let hit = target.opens(&line, it);
            last_line = line;
            if hit {
                std::thread::sleep(delay);
                break;
            }
        }
        let mut run = run;
        run.child.kill().unwrap();
        let (status, rest) = run.finish();
        assert!(
            !status.success(),
            "kill {k} ({target:?} of iteration {it}) came after the run finished"
        );
        let last = rest.last().cloned().unwrap_or(last_line);
        // where it landed: the phase of the last line the process printed
        let phase = ["rollout", "update", "checkpoint", "validation", "log-probs"]
            .into_iter()
            .find(|p| last.contains(&format!(": {p} (")))
            .unwrap_or(if last.contains("checkpoint saved") {
                "after checkpoint"
            } else {
                "metrics write"
            });
        *landed.entry(phase).or_default() += 1;

        // the files as the kill left them
        let its = metric_iterations(&killed);
        let mut sorted = its.clone();
        sorted.dedup();
        assert_eq!(sorted, its, "kill {k}: an iteration logged twice: {its:?}");
        assert!(its.windows(2).all(|w| w[0] < w[1]), "{its:?}");
        let ckpt = checkpoint_iteration(&killed);
        let covered: Vec<u64> = its.iter().copied().filter(|&i| i <= ckpt).collect();
        if ckpt > 0 {
            assert_eq!(
                covered,
                (0..=ckpt).collect::<Vec<_>>(),
                "kill {k}: the checkpoint of iteration {ckpt} covers a missing line ({its:?})"
            );
        }
        let past = its.iter().filter(|&&i| i > ckpt).count();
        assert!(
            past <= 1,
            "kill {k}: {past} logged iterations past the checkpoint {ckpt}"
        );
        lost.push(past);
    }
    let t = Instant::now();
    let (status, err) = spawn(&resume_args(&killed)).finish();
    assert!(
        status.success(),
        "the last resume failed: {status}\n{}",
        err.join("\n")
    );
    let last_resume = t.elapsed();

    // each iteration exactly once, in metrics.jsonl and in TensorBoard
    let want: Vec<u64> = (0..=u64::from(ITERATIONS)).collect();
    assert_eq!(metric_iterations(&killed), want);
    let mut tb: Vec<(String, i64)> = event_files(&killed)
        .unwrap()
        .iter()
        .flat_map(|f| scalars(&read_events(f).unwrap()))
        .map(|(tag, step, _)| (tag, step))
        .collect();
    let n = tb.len();
    tb.sort();
    tb.dedup();
    assert_eq!(tb.len(), n, "a TensorBoard scalar logged twice");
    assert_eq!(
        tb.iter().map(|(_, s)| *s as u64).max(),
        Some(u64::from(ITERATIONS))
    );
    // the same run: every metric but the wall times, and the final checkpoint byte for byte
    let differences = metric_differences(
        &metrics_without_timings(&killed),
        &metrics_without_timings(&reference),
    );
    assert!(
        differences.is_empty(),
        "resumed vs uninterrupted: {differences:#?}"
    );
    let (a, b) = (checkpoint_files(&killed), checkpoint_files(&reference));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (path, bytes) in &a {
        assert!(
            *bytes == b[path],
            "checkpoint file {} differs",
            path.display()
        );
    }
    let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len().max(1) as u32;
    eprintln!(
        "kill -9: {KILLS} kills, landed {landed:?}; iterations lost per kill {lost:?} (max {}); \
         resume start-up mean {:?}, max {:?}; uninterrupted run {uninterrupted:?}, last resume \
         {last_resume:?}",
        lost.iter().max().unwrap_or(&0),
        mean(&resume_startup),
        resume_startup.iter().max().copied().unwrap_or_default(),
    );
}
