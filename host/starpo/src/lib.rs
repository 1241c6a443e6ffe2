//! # ragen-gym-starpo: StarPO / StarPO-S multi-turn RL
//!
//! Rollout (env state manager, context manager, parser), rewards, the StarPO-S filter,
//! advantages (GAE, GRPO), PPO losses, and the training loop with validation, metrics and
//! checkpoints. Semantics follow RAGEN v1 (arXiv 2504.20073; `shared/spec/ragen.md`).
//!
//! ```
//! use ragen_gym_starpo::parse::parse_response;
//! let p = parse_response("<think>go</think><answer>Up || Left</answer>", true, "||", 5);
//! assert_eq!(p.actions, vec!["Up", "Left"]);
//! ```
#![deny(missing_docs)]

pub mod advantages;
pub mod batch;
pub mod config;
pub mod context;
pub mod events;
pub mod filter;
pub mod losses;
pub mod metrics;
pub mod parse;
#[cfg(feature = "trainer")]
pub mod policy_adapter;
pub mod pyfloat;
pub mod rollout;
pub mod run_dir;
pub mod stats;
#[cfg(feature = "trainer")]
pub mod trainer;

pub use batch::{CharTokenizer, Sample, Tokenize, build_sample};
pub use config::{Config, ConfigBuilder, ConfigError};
pub use events::{Phase, TrainEvent};
pub use filter::{FilterOutcome, FilterParams, filter_groups};
pub use metrics::Metrics;
pub use rollout::{EnvPool, Generator, RolloutParams, SamplingParams, rollout};
pub use run_dir::RunDir;
#[cfg(feature = "trainer")]
pub use trainer::{EnvFactory, EvalResult, TrainError, TrainSetup, Trainer, evaluate};
