//! # ragen-gym-starpo: StarPO / StarPO-S multi-turn RL
//!
//! The pipeline of one training iteration, one module per stage, in order: [`rollout`] (env
//! state manager) with [`prompt`] (the context manager: layout, parser, tokenizer interface),
//! [`rewards`] (reward functions, score normalisation), [`failure_policy`] (failing plugins),
//! [`filter`] (StarPO-S), [`batch`]
//! (training sequences and masks), [`advantages`] (log-probs, GAE / GRPO) with [`gigpo`]
//! (step-level advantages), [`losses`] and
//! [`update`] (PPO), [`validation`]; [`trainer`] runs them and emits [`events`]. [`sft`] fine-tunes
//! on an env expert's demonstrations before RL. Semantics follow
//! RAGEN v1 (arXiv 2504.20073), summarised in `docs/ragen-semantics.md`.
//!
//! The `trainer` feature (default) adds everything that needs the candle policy; the rest
//! builds without candle.
//!
//! ```
//! use ragen_gym_starpo::prompt::parse_response;
//! let p = parse_response("<think>go</think><answer>Up || Left</answer>", true, "||", 5);
//! assert_eq!(p.actions, vec!["Up", "Left"]);
//! ```
#![deny(missing_docs)]

#[cfg(feature = "trainer")]
pub mod action_constraint;
pub mod advantages;
pub mod batch;
pub mod config;
#[cfg(feature = "trainer")]
pub mod error;
pub mod events;
pub mod failure_policy;
pub mod filter;
pub mod gigpo;
#[cfg(feature = "trainer")]
pub mod losses;
pub mod metrics;
#[cfg(feature = "trainer")]
pub mod models;
#[cfg(feature = "trainer")]
pub mod passes;
#[cfg(feature = "trainer")]
pub mod policy_adapter;
pub mod prompt;
#[cfg(test)]
mod proptests;
pub mod pyfloat;
pub mod rewards;
pub mod rollout;
pub mod run_dir;
pub mod schedule;
pub mod seeds;
#[cfg(feature = "trainer")]
pub mod sft;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(feature = "trainer")]
pub mod trainer;
#[cfg(feature = "trainer")]
pub mod update;
#[cfg(feature = "trainer")]
pub mod validation;

#[cfg(feature = "trainer")]
pub use action_constraint::action_constraint;
pub use batch::{TrainSample, build_sample};
pub use config::{Config, ConfigBuilder, ConfigError, EnvPreset, PRESET_CPU_TABLE, Profile};
#[cfg(feature = "trainer")]
pub use error::TrainError;
pub use events::{Phase, ReportError, Reporter, Silent, Split, TrainEvent};
pub use filter::{FilterOutcome, FilterParams, GroupVerdict, filter_groups};
pub use metrics::Metrics;
pub use prompt::{CharTokenizer, Tokenize, TokenizeError};
pub use rollout::{
    EnvFactory, EnvPool, GenerateError, Generation, GenerationParams, Generator, RolloutParams,
    rollout,
};
pub use run_dir::{RunDir, RunInfo, RunLock, SftProgress, SftSchedule, TrainerState};
#[cfg(feature = "trainer")]
pub use sft::{Demonstrations, SftSetup, SftTrainer};
#[cfg(feature = "trainer")]
pub use trainer::{TrainSetup, Trainer};
#[cfg(feature = "trainer")]
pub use validation::{EvalResult, evaluate, evaluate_with};
