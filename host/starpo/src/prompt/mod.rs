//! The context manager (RAGEN `ragen/llm_agent/ctx_manager.py`): the prompt layout and turn
//! views (`context`), the answer grammar (`parse`), the tokenizer interface that turns chat
//! messages into ids (`tokenize`), and the exact tokens of responses sampled under constrained
//! decoding (`trace`). The rollout and the training batch both build on it, and it depends on
//! neither.

pub mod context;
pub mod parse;
pub mod tokenize;
pub mod trace;

pub use context::{
    Message, PromptConfig, Role, SampledBody, TurnView, build_messages, chatml_segment, env_prefix,
    forced_prefix, training_messages, turn_views,
};
pub use parse::{ParsedResponse, map_actions, parse_response};
pub use tokenize::{CharTokenizer, SampledSegment, Tokenize, TokenizeError, encode_sampled};
pub use trace::{OriginCounts, TokenOrigin, TokenTrace};
