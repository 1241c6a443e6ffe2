//! The progress display on stderr: a bar per phase (indicatif; hidden when stderr is not a
//! terminal, where a plain line per phase is printed instead) and one summary line per
//! iteration with the [`CURVES`] metrics.

use super::curves::{CURVES, STEP_TIME};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ragen_gym_starpo::{Metrics, ReportError, Reporter, TrainEvent};
use std::io::IsTerminal;

/// Renders training progress on stderr.
#[derive(Default)]
pub struct ProgressReporter {
    bar: Option<ProgressBar>,
    total: u32,
}

impl ProgressReporter {
    /// A reporter drawing on stderr.
    pub fn new() -> Self {
        Self::default()
    }

    fn clear(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The summary line of an iteration: each curve's metrics, then the step time.
pub fn summary_line(iteration: u32, metrics: &Metrics) -> String {
    let mut parts = Vec::new();
    for c in CURVES {
        for name in c.series(metrics.keys().map(String::as_str)) {
            parts.push(format!("{name}={:.*}", c.decimals, metrics[name]));
        }
    }
    if let Some(t) = metrics.get(STEP_TIME) {
        parts.push(format!("{STEP_TIME}={t:.1}"));
    }
    format!("iteration {iteration}: {}", parts.join(" "))
}

/// The line a run starts with: the iterations it will train, or, when a resumed run had already
/// reached its last iteration, that none are left.
pub fn started_line(start_iteration: u32, total: u32, batch: usize, params: usize) -> String {
    if start_iteration > total {
        format!(
            "no iterations left to train: the run ended at iteration {total} \
             (a larger --iterations, or sft's --epochs, continues it)"
        )
    } else {
        format!(
            "training iterations {start_iteration}..={total}: {batch} trajectories per rollout, \
             {params} trainable parameters"
        )
    }
}

impl Reporter for ProgressReporter {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        match *event {
            TrainEvent::Started {
                start_iteration,
                total,
                trainable_params,
                batch,
                ..
            } => {
                self.total = total;
                eprintln!(
                    "{}",
                    started_line(start_iteration, total, batch, trainable_params)
                );
            }
            TrainEvent::PhaseStarted {
                iteration,
                phase,
                units,
            } => {
                self.clear();
                if !std::io::stderr().is_terminal() {
                    eprintln!(
                        "iteration {iteration}/{}: {} ({units} units)",
                        self.total,
                        phase.name()
                    );
                }
                let bar =
                    ProgressBar::with_draw_target(Some(units as u64), ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>16} [{bar:30}] {pos}/{len} {elapsed_precise}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(format!("{iteration}/{} {}", self.total, phase.name()));
                self.bar = Some(bar);
            }
            TrainEvent::Progress { done, .. } => {
                if let Some(b) = &self.bar {
                    b.set_position(done as u64);
                }
            }
            TrainEvent::Trajectories { .. } => {}
            TrainEvent::Metrics { iteration, metrics } => {
                self.clear();
                eprintln!("{}", summary_line(iteration, metrics));
            }
            TrainEvent::CheckpointSaved {
                iteration,
                path,
                seconds,
            } => {
                self.clear();
                eprintln!(
                    "iteration {iteration}: checkpoint saved to {} in {seconds:.1} s",
                    path.display()
                );
            }
            TrainEvent::Finished { iteration } => {
                self.clear();
                eprintln!("finished after iteration {iteration}");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_started_line_says_when_no_iteration_is_left() {
        assert_eq!(
            started_line(3, 7, 32, 1_000),
            "training iterations 3..=7: 32 trajectories per rollout, 1000 trainable parameters"
        );
        assert_eq!(
            started_line(7, 7, 32, 1_000),
            "training iterations 7..=7: 32 trajectories per rollout, 1000 trainable parameters"
        );
        assert_eq!(
            started_line(8, 7, 32, 1_000),
            "no iterations left to train: the run ended at iteration 7 \
             (a larger --iterations, or sft's --epochs, continues it)"
        );
    }

    #[test]
    fn summary_line_follows_the_curves() {
        let m = Metrics::from([
            ("train/Bandit/success".to_string(), 0.5),
            ("val-env/Bandit/success".to_string(), 0.25),
            ("actor/grad_norm".to_string(), 1.234_56),
            ("critic/vf_loss".to_string(), 9.0),
            ("timing_s/step".to_string(), 12.34),
        ]);
        assert_eq!(
            summary_line(3, &m),
            "iteration 3: train/Bandit/success=0.500 val-env/Bandit/success=0.250 \
             actor/grad_norm=1.2346 timing_s/step=12.3"
        );
    }
}
