//! `ragen-gym check PLUGIN [--json]`: Gymnasium-style conformance checks (spec sanity, reset and
//! step determinism, limits) through the sandbox; for a reward-function plugin, `check_reward`'s
//! (scores without failures, deterministic). Exit 0 only if every check passes, exit 10
//! (`exit_code::CHECKS_FAILED`) when one fails.

use crate::ExpectedError;
use crate::shared::plugins::load;
use crate::shared::run::new_env;
use crate::shared::sandbox::SandboxArgs;
use ragen_gym_core::{PluginKind, RewardFunction};
use ragen_gym_sandbox::WasmRewardFunction;

/// Arguments of `ragen-gym check`.
#[derive(clap::Args)]
pub struct Args {
    /// A `.wasm` component file or a built-in name.
    pub plugin: String,
    /// The env's config as a JSON object (default: the env's defaults).
    #[arg(long, default_value = "")]
    pub config: String,
    /// Print JSON (keys `ok`, `failures`, `passed`, `env_id`).
    #[arg(long)]
    pub json: bool,
    /// Sandbox limits and capability grants.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let plugin = load(&args.plugin, &args.sandbox)?;
    let grants = args.sandbox.grants()?;
    let report = if plugin.info().manifest.kind == PluginKind::RewardFunction {
        ragen_gym_core::check_reward(|| {
            WasmRewardFunction::new(&plugin)
                .map(|f| Box::new(f) as Box<dyn RewardFunction>)
                .map_err(|e| e.to_string())
        })
    } else {
        ragen_gym_core::check_env(|| new_env(&plugin, &args.config, grants.clone()))
    };
    // An env that could not be made never told its id: name the plugin by its manifest's.
    let name = if report.env_id.is_empty() {
        plugin.info().manifest.id.clone()
    } else {
        report.env_id.clone()
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for p in &report.passed {
            println!("ok    {p}");
        }
        for f in &report.failures {
            println!("FAIL  {f}");
        }
        println!(
            "{name}: {}",
            if report.ok {
                "all checks passed"
            } else {
                "checks failed"
            }
        );
    }
    if report.ok {
        Ok(())
    } else {
        Err(ExpectedError::ChecksFailed {
            env_id: name,
            failed: report.failures.len(),
            total: report.failures.len() + report.passed.len(),
        }
        .into())
    }
}
