//! `metrics.jsonl` (one object per iteration: `iteration` and every finite metric) and
//! `trajectories.jsonl` (the first `trainer.log_trajectories` trajectories of each rollout, one
//! [`TrajectoryRecord`] a line: with `iteration`, `split`, `score` and what `ragen-gym replay`
//! needs besides the seed and the steps).
//!
//! Lines are written whole; both files are flushed and fsynced once per iteration, when its
//! metrics arrive (before the trainer writes its checkpoint). On a resumed run, lines from the
//! first iteration it logs on (and a line cut short by a crash) are dropped first, so the files
//! match the checkpoint and each iteration is written once.

use ragen_gym_core::Trajectory;
use ragen_gym_starpo::run_dir::{JsonlWriter, TrajectoryRecord};
use ragen_gym_starpo::{GroupVerdict, ReportError, Reporter, RunDir, Split, TrainEvent};

/// The env a run's trajectories come from, recorded on every line so that a trajectory can be
/// replayed from its line alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSource {
    /// The plugin reference (`sokoban`, a path, a pinned URL, an `oci://` reference).
    pub plugin: String,
    /// sha256 of the plugin, hex.
    pub plugin_sha256: String,
    /// The env's JSON config (`env.config`).
    pub env_config: String,
}

/// Writes the run's JSONL files.
pub struct JsonlReporter {
    run: RunDir,
    env: EnvSource,
    log_trajectories: usize,
    /// The metrics and trajectories files (`metrics.jsonl`, `trajectories.jsonl` for `train`).
    paths: (std::path::PathBuf, std::path::PathBuf),
    files: Option<(JsonlWriter, JsonlWriter)>,
}

impl JsonlReporter {
    /// A reporter writing into `run`; `log_trajectories` is `trainer.log_trajectories`.
    pub fn new(run: RunDir, env: EnvSource, log_trajectories: usize) -> Self {
        let paths = (run.metrics_path(), run.trajectories_path());
        Self::with_files(run, env, log_trajectories, paths)
    }

    /// A reporter writing into other files of `run` (`sft` keeps its epochs apart from the
    /// iterations of a `train --resume` that continues the run).
    pub fn with_files(
        run: RunDir,
        env: EnvSource,
        log_trajectories: usize,
        paths: (std::path::PathBuf, std::path::PathBuf),
    ) -> Self {
        Self {
            run,
            env,
            log_trajectories,
            paths,
            files: None,
        }
    }

    fn files(&mut self) -> Result<&mut (JsonlWriter, JsonlWriter), ReportError> {
        if self.files.is_none() {
            self.files = Some((
                self.run.jsonl_writer(&self.paths.0)?,
                self.run.jsonl_writer(&self.paths.1)?,
            ));
        }
        Ok(self.files.as_mut().expect("opened above"))
    }

    /// The line of trajectory `t` of `iteration`'s `split` rollout, with the filter's verdict
    /// on its group when the rollout was filtered.
    pub fn record(
        &self,
        iteration: u32,
        split: Split,
        t: &Trajectory,
        verdict: Option<&GroupVerdict>,
    ) -> TrajectoryRecord {
        TrajectoryRecord {
            trajectory: t.clone(),
            iteration,
            split,
            score: t.score(),
            plugin: Some(self.env.plugin.clone()),
            plugin_sha256: self.env.plugin_sha256.clone(),
            env_config: Some(self.env.env_config.clone()),
            in_group_std: verdict.map(|v| v.std).filter(|s| s.is_finite()),
            filter_kept: verdict.map(|v| v.kept),
        }
    }
}

impl Reporter for JsonlReporter {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        match *event {
            TrainEvent::Started {
                first_logged,
                resumed: true,
                ..
            } => {
                self.files = None;
                let first = u64::from(first_logged);
                self.run.truncate_jsonl_from(&self.paths.0, first)?;
                self.run.truncate_jsonl_from(&self.paths.1, first)?;
            }
            TrainEvent::Trajectories {
                iteration,
                split,
                trajectories,
                groups,
            } => {
                let lines: Vec<TrajectoryRecord> = trajectories
                    .iter()
                    .take(self.log_trajectories)
                    .map(|t| self.record(iteration, split, t, groups.get(t.group)))
                    .collect();
                let (_, trajs) = self.files()?;
                for l in &lines {
                    trajs.write(l)?;
                }
            }
            TrainEvent::Metrics { iteration, metrics } => {
                let mut obj = serde_json::Map::new();
                obj.insert("iteration".into(), iteration.into());
                for (k, v) in metrics {
                    if v.is_finite() {
                        obj.insert(k.clone(), (*v).into());
                    }
                }
                let (m, trajs) = self.files()?;
                m.write(&obj)?;
                trajs.sync()?;
                m.sync()?;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_starpo::Metrics;

    fn traj(seed: u64) -> Trajectory {
        Trajectory {
            env_id: "t/X-v0".into(),
            tag: "X".into(),
            group: 0,
            seed,
            turns: vec![],
            final_observation: String::new(),
            num_actions: 0,
            terminated: true,
            truncated: false,
            success: true,
            penalty: -0.1,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    fn iteration(r: &mut JsonlReporter, it: u32, x: f64) {
        let mut trajs = [traj(1), traj(2), traj(3)];
        trajs[1].group = 1;
        trajs[2].group = 2;
        // the filter's verdicts on groups 0 and 1; group 2 has none (as if unfiltered)
        let groups = [
            GroupVerdict {
                std: 0.25,
                kept: true,
            },
            GroupVerdict {
                std: f64::NAN,
                kept: false,
            },
        ];
        r.report(&TrainEvent::Trajectories {
            iteration: it,
            split: Split::Train,
            trajectories: &trajs,
            groups: &groups,
        })
        .unwrap();
        let m = Metrics::from([("x".to_string(), x), ("nan".to_string(), f64::NAN)]);
        r.report(&TrainEvent::Metrics {
            iteration: it,
            metrics: &m,
        })
        .unwrap();
    }

    #[test]
    fn lines_are_whole_and_a_resume_drops_what_follows_the_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        let run = RunDir::create(d.path()).unwrap();
        let env = EnvSource {
            plugin: "sokoban".into(),
            plugin_sha256: "abc".into(),
            env_config: r#"{"dim_room":[6,6]}"#.into(),
        };
        let mut r = JsonlReporter::new(run.clone(), env.clone(), 2);
        for it in 1..=3 {
            iteration(&mut r, it, f64::from(it) * 10.0);
        }
        drop(r);
        let m = run.read_metrics().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[2], serde_json::json!({"iteration": 3, "x": 30.0}));
        let t = std::fs::read_to_string(run.trajectories_path()).unwrap();
        let t: Vec<serde_json::Value> = t
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(t.len(), 6, "two of three trajectories per iteration");
        assert_eq!(t[0]["split"], "train");
        assert_eq!(t[0]["plugin_sha256"], "abc");
        assert_eq!(t[0]["plugin"], "sokoban");
        assert_eq!(t[0]["env_config"], r#"{"dim_room":[6,6]}"#);
        assert_eq!(t[0]["score"], -0.1);
        assert_eq!(
            (&t[0]["in_group_std"], &t[0]["filter_kept"]),
            (&0.25.into(), &true.into())
        );
        // a non-finite std is left out, the verdict kept
        assert_eq!(t[1].get("in_group_std"), None);
        assert_eq!(t[1]["filter_kept"], false);
        assert_eq!(t[5]["iteration"], 3);
        // resumed from the checkpoint of iteration 1: iterations 2 and 3 are rewritten
        let mut r = JsonlReporter::new(run.clone(), env, 2);
        r.report(&TrainEvent::Started {
            start_iteration: 2,
            first_logged: 2,
            total: 3,
            resumed: true,
            trainable_params: 0,
            batch: 3,
        })
        .unwrap();
        iteration(&mut r, 2, 21.0);
        let its: Vec<(u64, f64)> = run
            .read_metrics()
            .unwrap()
            .iter()
            .map(|v| (v["iteration"].as_u64().unwrap(), v["x"].as_f64().unwrap()))
            .collect();
        assert_eq!(its, vec![(1, 10.0), (2, 21.0)]);
        let t = std::fs::read_to_string(run.trajectories_path()).unwrap();
        assert_eq!(t.lines().count(), 4);
    }
}
