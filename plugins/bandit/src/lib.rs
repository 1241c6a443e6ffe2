//! # ragen-bandit: RAGEN's two-armed bandit as a ragen-gym environment plugin
//!
//! One pull between two named arms (arXiv 2504.20073 §3; RAGEN `ragen/env/bandit/env.py`): the
//! low arm ("Phoenix") always pays 0.1, the high arm ("Dragon") pays 1.0 with probability 0.25;
//! the arm order is shuffled by the seed; success means picking the high arm. Names and payouts
//! are configurable ([`BanditConfig`]).
//!
//! ```
//! use ragen_gym_sdk::{Environment, adapter};
//! use ragen_bandit::Bandit;
//!
//! let mut env = adapter::create::<Bandit>("").unwrap();
//! env.reset(0).unwrap();
//! let step = env.step("Dragon").unwrap();
//! assert!(step.success && step.terminated);
//! ```

#![deny(missing_docs)]

pub mod config;
pub mod env;
pub mod text;

pub use config::{BanditConfig, Payout};
pub use env::Bandit;

ragen_gym_sdk::export_env!(Bandit);
