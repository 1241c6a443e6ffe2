//! One module per subcommand; what they share is in `crate::shared`.

pub mod author;
pub mod bench;
pub mod check;
pub mod eval;
pub mod generate;
pub mod inspect;
pub mod play;
pub mod plot;
pub mod publish;
pub mod replay;
pub mod serve;
pub mod sft;
pub mod train;
pub mod view;
pub mod webshop;
