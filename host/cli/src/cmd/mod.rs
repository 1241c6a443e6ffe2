//! One module per subcommand.

pub mod bench;
pub mod check;
pub mod device_args;
pub mod eval;
pub mod generate;
pub mod inspect;
pub mod play;
pub mod plot;
pub mod plugin_args;
pub mod publish;
pub mod replay;
pub mod run_config;
pub mod train;
pub mod webshop;
