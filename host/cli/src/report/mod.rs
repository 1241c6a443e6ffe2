//! Reporters: each turns the trainer's [`TrainEvent`]s into one sink (after cargo-nextest's
//! reporter split): the progress display on stderr ([`progress`]), `metrics.jsonl` and
//! `trajectories.jsonl` ([`jsonl`]), TensorBoard event files ([`tensorboard`]), the closing
//! validation summary on stdout ([`summary`]). [`curves`] is the list of metrics a person watches, shared
//! by the progress line and `ragen-gym plot`.

pub mod curves;
pub mod jsonl;
pub mod progress;
pub mod summary;
pub mod tensorboard;

use ragen_gym_starpo::{ReportError, Reporter, TrainEvent};

/// Sends every event to each reporter in turn; the first failure stops training.
pub struct Reporters(pub Vec<Box<dyn Reporter>>);

impl Reporter for Reporters {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        for r in &mut self.0 {
            r.report(event)?;
        }
        Ok(())
    }
}
