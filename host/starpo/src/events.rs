//! Events the training loop emits; reporters (progress bars, logs) consume them. The loop never
//! prints (style §10).

use crate::metrics::Metrics;
use std::path::PathBuf;

/// A phase of one iteration (RAGEN's `timing_s/*` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Multi-turn rollout (`gen`).
    Rollout,
    /// Recompute log-probs, reference log-probs and values.
    Score,
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
            Phase::Score => "score",
            Phase::Update => "update",
            Phase::Validation => "validation",
            Phase::Checkpoint => "checkpoint",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainEvent {
    /// The run starts (or resumes) at `start_iteration` (1-based) and ends after `total`.
    Started {
        /// First iteration to run.
        start_iteration: u32,
        /// Last iteration.
        total: u32,
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
    /// Progress inside a phase: `done` of the phase's units.
    Progress {
        /// Iteration.
        iteration: u32,
        /// The phase.
        phase: Phase,
        /// Units done.
        done: usize,
    },
    /// The metrics line of an iteration was written to `metrics.jsonl`.
    Metrics {
        /// Iteration.
        iteration: u32,
        /// The metrics.
        metrics: Metrics,
    },
    /// A checkpoint was saved.
    CheckpointSaved {
        /// Iteration.
        iteration: u32,
        /// Its directory.
        path: PathBuf,
    },
    /// The run finished.
    Finished {
        /// Last iteration run.
        iteration: u32,
    },
}
