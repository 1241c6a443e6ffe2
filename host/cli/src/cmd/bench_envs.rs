//! `ragen-gym bench envs [--json]`: per built-in env, env steps/s natively and through the
//! sandbox (fuel on and off) in the same run, their ratio, and the cost of a fresh instance
//! (instantiate + constructor + spec + reset, µs). Timing noise between runs is large (±40 %,
//! `shared/spec/wasm.md`), so only ratios within one run are meaningful.

use crate::cmd::plugin_args::{read_plugin, splitmix};
use ragen_gym_core::{Env, NativeEnv};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig};
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `bench envs`.
#[derive(clap::Args)]
pub struct EnvsArgs {
    /// Env steps per measurement.
    #[arg(long, default_value_t = 200_000)]
    pub steps: u64,
    /// Fresh instances per measurement.
    #[arg(long, default_value_t = 300)]
    pub instances: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Steps/s of a random-action loop (resets included when episodes end).
fn steps_per_second(env: &mut dyn Env, steps: u64) -> anyhow::Result<f64> {
    let names = env.spec().action_names.clone().unwrap_or_else(|| vec!["noop".into()]);
    let mut rng = 1u64;
    let mut seed = 0u64;
    env.reset(seed)?;
    let start = Instant::now();
    for _ in 0..steps {
        let a = &names[(splitmix(&mut rng) % names.len() as u64) as usize];
        let r = env.step(a)?;
        if r.terminated || r.truncated {
            seed += 1;
            env.reset(seed)?;
        }
    }
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

/// Mean µs to make a fresh env (new instance) and reset it.
fn fresh_instance_us(plugin: &Plugin, n: u32) -> anyhow::Result<f64> {
    // Warm up the pool slots.
    plugin.new_env("", Grants::default())?.reset(0)?;
    let start = Instant::now();
    for i in 0..n {
        let mut e = plugin.new_env("", Grants::default())?;
        e.reset(u64::from(i))?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1)))
}

fn native(name: &str) -> anyhow::Result<Box<dyn Env>> {
    Ok(match name {
        "bandit" => Box::new(NativeEnv::<ragen_bandit::Bandit>::new("")?),
        "sokoban" => Box::new(NativeEnv::<ragen_sokoban::Sokoban>::new("")?),
        "frozenlake" => Box::new(NativeEnv::<ragen_frozen_lake::FrozenLake>::new("")?),
        other => anyhow::bail!("no native build of {other}"),
    })
}

/// Run `bench envs`.
pub fn run(args: EnvsArgs) -> anyhow::Result<ExitCode> {
    let base = SandboxConfig { cache_dir: None, max_instances: 64, ..SandboxConfig::default() };
    let fuel_on = Sandbox::new(SandboxConfig { fuel: true, ..base.clone() })?;
    let fuel_off = Sandbox::new(SandboxConfig { fuel: false, ..base })?;
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "{:<11} {:>12} {:>12} {:>12} {:>8} {:>8} {:>11} {:>11}",
            "env", "native/s", "wasm fuel/s", "wasm nofuel/s", "x fuel", "x nofuel", "fresh fuel", "fresh nofuel"
        );
    }
    for name in ["bandit", "sokoban", "frozenlake"] {
        let (label, bytes) = read_plugin(name)?;
        let p_on = fuel_on.load_bytes(&label, &bytes)?;
        let p_off = fuel_off.load_bytes(&label, &bytes)?;
        let native_sps = steps_per_second(native(name)?.as_mut(), args.steps)?;
        let on_sps = steps_per_second(&mut p_on.new_env("", Grants::default())?, args.steps)?;
        let off_sps = steps_per_second(&mut p_off.new_env("", Grants::default())?, args.steps)?;
        let fresh_on = fresh_instance_us(&p_on, args.instances)?;
        let fresh_off = fresh_instance_us(&p_off, args.instances)?;
        let row = serde_json::json!({
            "env": name,
            "native_steps_per_second": native_sps,
            "sandbox_fuel_steps_per_second": on_sps,
            "sandbox_nofuel_steps_per_second": off_sps,
            "slowdown_fuel": native_sps / on_sps,
            "slowdown_nofuel": native_sps / off_sps,
            "sandbox_fuel_step_us": 1e6 / on_sps,
            "fresh_instance_fuel_us": fresh_on,
            "fresh_instance_nofuel_us": fresh_off,
        });
        if !args.json {
            println!(
                "{:<11} {:>12.0} {:>12.0} {:>12.0} {:>8.1} {:>8.1} {:>9.1}µs {:>9.1}µs",
                name, native_sps, on_sps, off_sps, native_sps / on_sps, native_sps / off_sps, fresh_on, fresh_off
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "steps": args.steps, "instances": args.instances, "envs": rows }))?);
    } else {
        println!("(steps/s include resets at episode ends; x = native/sandbox; fresh = new instance + reset)");
    }
    Ok(ExitCode::SUCCESS)
}
