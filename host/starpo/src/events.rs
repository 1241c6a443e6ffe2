//! Events the training loop emits; reporters consume them and own every sink (the progress bar,
//! `metrics.jsonl`, `trajectories.jsonl`, TensorBoard), after cargo-nextest's `TestEvent` and
//! reporter split. The loop never prints and never writes a log file itself.

use crate::filter::GroupVerdict;
use crate::metrics::Metrics;
use ragen_gym_core::Trajectory;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A phase of one iteration (RAGEN's `timing_s/*` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Multi-turn rollout (`gen`).
    Rollout,
    /// Recompute old log-probs, reference log-probs and values (`old_log_prob`).
    LogProbs,
    /// Critic and actor updates.
    Update,
    /// Validation (`testing`).
    Validation,
    /// Checkpoint writing.
    Checkpoint,
}

impl Phase {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Rollout => "rollout",
            Phase::LogProbs => "log-probs",
            Phase::Update => "update",
            Phase::Validation => "validation",
            Phase::Checkpoint => "checkpoint",
        }
    }
}

/// Which rollout a batch of trajectories comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// A training rollout.
    Train,
    /// A validation run.
    Val,
}

impl Split {
    /// `train` or `val` (the `split` field of `trajectories.jsonl`).
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

/// What happened. Events borrow the trainer's data; a reporter copies what it keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrainEvent<'a> {
    /// The run starts at `start_iteration` (1-based) and ends after `total`; `resumed` when it
    /// continues a run directory: from its checkpoint at iteration `start_iteration - 1`, or from
    /// the start when it crashed before its first checkpoint.
    Started {
        /// First iteration to run.
        start_iteration: u32,
        /// The first iteration this run logs (0 when it validates before training). A resumed
        /// run's reporters first drop what earlier processes logged for it and later ones: lines
        /// written after the checkpoint, which this run writes again.
        first_logged: u32,
        /// Last iteration.
        total: u32,
        /// Whether the run continues from a checkpoint.
        resumed: bool,
        /// Trainable scalars of the actor.
        trainable_params: usize,
        /// Trajectories per training rollout.
        batch: usize,
    },
    /// A phase begins.
    PhaseStarted {
        /// Iteration (0 = before training).
        iteration: u32,
        /// The phase.
        phase: Phase,
        /// Work units of the phase (prompts to sample, micro-batches to run), when known.
        units: usize,
    },
    /// Progress inside a phase: `done` of the phase's units. Rollout progress counts the
    /// prompts sampled in the current turn, so it restarts every turn.
    Progress {
        /// Iteration.
        iteration: u32,
        /// The phase.
        phase: Phase,
        /// Units done.
        done: usize,
    },
    /// The trajectories of a rollout, in rollout order, with their final rewards (reward
    /// functions included).
    Trajectories {
        /// Iteration (0 = validation before training).
        iteration: u32,
        /// Training or validation.
        split: Split,
        /// The trajectories.
        trajectories: &'a [Trajectory],
        /// The StarPO-S filter's verdict on each env group, indexed by [`Trajectory::group`]
        /// (a training rollout's; empty for validation, which is not filtered).
        groups: &'a [GroupVerdict],
    },
    /// The metrics of an iteration were computed (once per iteration, before its checkpoint: a
    /// crash between the two leaves a line past the checkpoint, which a resumed run drops and
    /// writes again, never a checkpoint whose line is missing).
    Metrics {
        /// Iteration (0 = validation before training).
        iteration: u32,
        /// The metrics.
        metrics: &'a Metrics,
    },
    /// A checkpoint was saved (after the iteration's metrics).
    CheckpointSaved {
        /// Iteration.
        iteration: u32,
        /// Its directory.
        path: &'a Path,
        /// Seconds it took to write (RAGEN's `timing_s/save_checkpoint`, which cannot be in the
        /// iteration's metrics: they are written first).
        seconds: f64,
    },
    /// The run finished.
    Finished {
        /// Last iteration run.
        iteration: u32,
    },
}

/// Why a reporter failed (its sink's own error).
pub type ReportError = Box<dyn std::error::Error + Send + Sync>;

/// Consumes [`TrainEvent`]s. An error stops training: a sink that cannot be written is a failed
/// run.
pub trait Reporter {
    /// Handle one event.
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError>;
}

impl<F: FnMut(&TrainEvent<'_>) -> Result<(), ReportError>> Reporter for F {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        self(event)
    }
}

/// A reporter that ignores every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Reporter for Silent {
    fn report(&mut self, _: &TrainEvent<'_>) -> Result<(), ReportError> {
        Ok(())
    }
}

/// Delivers events to a reporter and keeps its first error, which stops training at the next
/// [`Emitter::check`] (progress callbacks inside a stage cannot return it themselves).
#[cfg(feature = "trainer")]
pub(crate) struct Emitter<'r> {
    reporter: &'r mut dyn Reporter,
    error: Option<ReportError>,
}

#[cfg(feature = "trainer")]
impl<'r> Emitter<'r> {
    pub(crate) fn new(reporter: &'r mut dyn Reporter) -> Self {
        Self {
            reporter,
            error: None,
        }
    }

    pub(crate) fn emit(&mut self, event: TrainEvent<'_>) {
        if self.error.is_none()
            && let Err(e) = self.reporter.report(&event)
        {
            self.error = Some(e);
        }
    }

    /// `phase` of `iteration` begins, with `units` of work.
    pub(crate) fn phase(&mut self, iteration: u32, phase: Phase, units: usize) {
        self.emit(TrainEvent::PhaseStarted {
            iteration,
            phase,
            units,
        });
    }

    /// A progress callback for `phase` of `iteration`.
    pub(crate) fn progress(&mut self, iteration: u32, phase: Phase) -> impl FnMut(usize) + '_ {
        move |done| {
            self.emit(TrainEvent::Progress {
                iteration,
                phase,
                done,
            })
        }
    }

    /// The reporter's first error, if any.
    pub(crate) fn check(&mut self) -> Result<(), ReportError> {
        self.error.take().map_or(Ok(()), Err)
    }
}
