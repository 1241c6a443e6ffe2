//! The command line: [`Cli`] and its [`Command`]s, and [`run`], which dispatches a parsed
//! command to its module in `cmd` and maps its error to an exit code.

use crate::cmd;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Train LLM agents with multi-turn RL (StarPO) in sandboxed WebAssembly environments.
#[derive(Parser)]
#[command(name = "ragen-gym", version, about, after_help = crate::error::exit_codes_help())]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Show a plugin's manifest, interface version, sha256 and capabilities (runs no plugin code).
    Inspect(cmd::inspect::Args),
    /// Conformance-check a plugin (determinism, spec sanity, limits), like Gymnasium's check_env.
    Check(cmd::check::Args),
    /// Play an environment in the terminal.
    Play(cmd::play::Args),
    /// Evaluate a policy (random, or a model) on an environment.
    Eval(cmd::eval::Args),
    /// Benchmarks that print side-by-side ratios.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Generate text with a model (default: SmolLM2-135M-Instruct).
    Generate(cmd::generate::Args),
    /// Serve a model (a run's checkpoint, a GGUF, a Hugging Face directory) over an
    /// OpenAI-compatible HTTP API.
    Serve(cmd::serve::Args),
    /// Train a policy with StarPO / StarPO-S.
    Train(cmd::train::Args),
    /// Fine-tune a policy on the env expert's demonstrations (continue with `train --resume`).
    Sft(cmd::sft::Args),
    /// Write PNG training curves for a run directory.
    Plot(cmd::plot::Args),
    /// Push a plugin to an OCI registry as a Wasm OCI artifact (`oci://registry/namespace/name:tag`).
    Publish(cmd::publish::Args),
    /// Re-run recorded trajectories of a run against the env and show the first difference.
    Replay(cmd::replay::Args),
    /// Write a run's trajectories as one self-contained HTML page (boards, responses, rewards).
    View(cmd::view::Args),
    /// Write a new plugin project (Rust, Python or JavaScript) to build with `ragen-gym build`.
    New(cmd::author::new::Args),
    /// Build a plugin project into a component and inspect it.
    Build(cmd::author::build::Args),
    /// The WebShop-compatible test server.
    #[command(subcommand)]
    Webshop(cmd::webshop::WebshopCommand),
}

/// Set up logging (`RAGEN_LOG`, default `warn`, on stderr), run the subcommand, print an error
/// with its whole chain, and map it to an exit code ([`crate::exit_code`]).
pub fn run(cli: Cli) -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RAGEN_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let result = match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Play(a) => cmd::play::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Train(a) => cmd::train::run(a),
        Command::Sft(a) => cmd::sft::run(a),
        Command::Plot(a) => cmd::plot::run(a),
        Command::Publish(a) => cmd::publish::run(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::View(a) => cmd::view::run(a),
        Command::New(a) => cmd::author::new::run(a),
        Command::Build(a) => cmd::author::build::run(a),
        Command::Webshop(c) => cmd::webshop::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            crate::error::exit_code_of(&err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;

    /// Counts and sizes that must be positive (or bounded) are refused on the command line,
    /// naming the flag, with the usage exit code: `eval --episodes 0` exited 0 with success 0.0,
    /// `serve --max-batch 0` started (the serve limits now have upper bounds too, so the refusal
    /// prints a readable range), `--memory-mib 0` failed later with exit code 1 and
    /// `--memory-mib` past 4096 MiB (a 32-bit Wasm memory's 4 GiB) was taken.
    #[test]
    fn zero_counts_and_oversized_limits_are_usage_errors() {
        let cases: &[(&[&str], &str, &[&str])] = &[
            (&["eval", "--env", "bandit"], "--episodes", &["0"]),
            (&["eval", "--env", "bandit"], "--memory-mib", &["0", "4097"]),
            (&["train", "--env", "bandit"], "--memory-mib", &["0"]),
            (&["serve", "runs/x"], "--max-batch", &["0", "4097"]),
            (&["serve", "runs/x"], "--max-n", &["0", "129"]),
            (&["serve", "runs/x"], "--max-tokens", &["0", "1048577"]),
            (
                &["serve", "runs/x"],
                "--max-body-bytes",
                &["0", "1073741825"],
            ),
        ];
        for (base, flag, bad) in cases {
            let parse = |v: &str| {
                let args = ["ragen-gym"].iter().chain(base.iter()).chain([flag, &v]);
                Cli::try_parse_from(args)
            };
            for v in *bad {
                let e = parse(v)
                    .err()
                    .unwrap_or_else(|| panic!("{base:?} {flag} {v} was accepted"));
                assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{e}");
                assert!(e.to_string().contains(flag), "{e}");
                assert_eq!(e.exit_code(), 2);
            }
            assert!(parse("1").is_ok(), "{base:?} {flag} 1");
        }
        let max = [
            "ragen-gym",
            "eval",
            "--env",
            "bandit",
            "--memory-mib",
            "4096",
        ];
        assert!(Cli::try_parse_from(max).is_ok());
        // the refusal states the range readably (it printed 1..18446744073709551615)
        let e = Cli::try_parse_from(["ragen-gym", "serve", "runs/x", "--max-batch", "0"])
            .err()
            .unwrap();
        assert!(e.to_string().contains("0 is not in 1..=4096"), "{e}");
    }
}
