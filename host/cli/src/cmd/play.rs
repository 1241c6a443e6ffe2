//! `ragen-gym play --env PLUGIN [--seed N]`: play an environment in the terminal. Type an
//! action per line (one of the action names, case-insensitive, or free text); `quit` stops.

use crate::shared::plugins::load;
use crate::shared::run::new_env;
use crate::shared::sandbox::SandboxArgs;
use std::io::{BufRead, Write};

/// Arguments of `ragen-gym play`.
#[derive(clap::Args)]
pub struct Args {
    /// A `.wasm` component file or a built-in name.
    #[arg(long = "env")]
    pub env: String,
    /// Reset seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The env's config as a JSON object (default: the env's defaults).
    #[arg(long, default_value = "")]
    pub config: String,
    /// Sandbox limits and capability grants.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let plugin = load(&args.env, &args.sandbox)?;
    let mut env = new_env(&plugin, &args.config, args.sandbox.grants()?)?;
    let spec = env.spec().clone();
    println!(
        "{} {}: {}\n\n{}",
        spec.id, spec.version, spec.description, spec.instruction
    );
    if let Some(legend) = &spec.symbol_legend {
        let parts: Vec<String> = legend
            .iter()
            .map(|s| format!("{} {}", s.symbol, s.meaning))
            .collect();
        println!("symbols: {}", parts.join(", "));
    }
    if let Some(names) = &spec.action_names {
        println!("actions: {}", names.join(", "));
    }
    let first = env.reset(args.seed)?;
    println!("\n{}", first.observation);
    let stdin = std::io::stdin();
    let mut total = 0.0;
    let mut steps = 0u32;
    loop {
        print!("> ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let input = line.trim();
        if input.eq_ignore_ascii_case("quit") || input.eq_ignore_ascii_case("q") {
            break;
        }
        // Map to an action name case-insensitively, as the trainer does.
        let action = spec
            .action_names
            .as_ref()
            .and_then(|names| {
                names
                    .iter()
                    .find(|n| n.eq_ignore_ascii_case(input))
                    .cloned()
            })
            .unwrap_or_else(|| input.to_string());
        let r = env.step(&action)?;
        steps += 1;
        total += r.reward;
        println!("\n{}", r.observation);
        println!(
            "reward {:+.2} (return {:+.2}), valid {}, effective {}, step {}/{}",
            r.reward,
            total,
            r.action_is_valid,
            r.action_is_effective,
            steps,
            spec.max_episode_steps
        );
        if r.terminated || r.truncated || steps >= spec.max_episode_steps {
            let why = if r.success {
                "solved"
            } else if r.terminated {
                "episode over"
            } else {
                "out of steps"
            };
            println!("{why}: return {total:+.2} in {steps} steps");
            break;
        }
    }
    Ok(())
}
