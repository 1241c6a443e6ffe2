//! `ragen-gym bench envs [--json]`: per built-in env, env steps/s natively and through the
//! sandbox (fuel on and off) in the same run, their ratio, and the cost of a fresh instance
//! (instantiate + constructor + spec + reset, µs). The envs are the registry's built-ins (or
//! those named with `--env`); one without a native build (Countdown, in Python) is measured
//! sandboxed only, and one that needs a capability (the WebShop bridge) is skipped. Timing noise
//! between runs is large on a shared machine, so only ratios within one run are meaningful.

use ragen_gym_core::{Env, splitmix64};
use ragen_gym_sandbox::{Grants, Plugin, Sandbox, SandboxConfig, WasmEnv};
use std::time::{Duration, Instant};

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
    /// Only these built-ins (repeatable; default: all).
    #[arg(long = "env", value_name = "NAME")]
    pub envs: Vec<String>,
    /// The actions of a free-text env, drawn at random (repeatable; default `noop`).
    #[arg(long = "action", value_name = "TEXT")]
    pub actions: Vec<String>,
}

/// Steps/s of a random-action loop (only `step` calls are timed; episodes that end are reset
/// untimed) and the mean `reset` time in µs.
fn steps_per_second(env: &mut dyn Env, steps: u64, text: &[String]) -> anyhow::Result<(f64, f64)> {
    let names = env.spec().action_names.clone().unwrap_or_else(|| {
        if text.is_empty() {
            vec!["noop".into()]
        } else {
            text.to_vec()
        }
    });
    let mut rng = 1u64;
    let mut seed = 0u64;
    env.reset(seed)?;
    let (mut step_time, mut reset_time, mut resets) = (Duration::ZERO, Duration::ZERO, 0u32);
    for _ in 0..steps {
        let a = &names[(splitmix64(&mut rng) % names.len() as u64) as usize];
        let t = Instant::now();
        let r = env.step(a)?;
        step_time += t.elapsed();
        if r.terminated || r.truncated {
            seed += 1;
            let t = Instant::now();
            env.reset(seed)?;
            reset_time += t.elapsed();
            resets += 1;
        }
    }
    Ok((
        steps as f64 / step_time.as_secs_f64(),
        reset_time.as_secs_f64() * 1e6 / f64::from(resets.max(1)),
    ))
}

/// Mean µs to make a fresh env (new instance) and reset it.
fn fresh_instance_us(plugin: &Plugin, n: u32) -> anyhow::Result<f64> {
    // Warm up the pool slots.
    WasmEnv::new(plugin, "", Grants::default())?.reset(0)?;
    let start = Instant::now();
    for i in 0..n {
        let mut e = WasmEnv::new(plugin, "", Grants::default())?;
        e.reset(u64::from(i))?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1)))
}

/// One built-in's row: steps/s natively (NaN without a native build), sandboxed with fuel and
/// without, and the cost of a fresh instance with and without fuel; `None` for an env that
/// needs a capability.
fn measure(
    name: &str,
    wasm: &[u8],
    native: Option<&mut (dyn Env + 'static)>,
    sandboxes: [&Sandbox; 2],
    args: &EnvsArgs,
) -> anyhow::Result<Option<serde_json::Value>> {
    let label = format!("built-in {name}");
    let p_on = sandboxes[0].load_bytes(&label, wasm)?;
    if !p_on.info().manifest.capabilities.http.is_empty() {
        return Ok(None);
    }
    let p_off = sandboxes[1].load_bytes(&label, wasm)?;
    let text = &args.actions;
    let (native_sps, native_reset) = match native {
        Some(env) => steps_per_second(env, args.steps, text)?,
        None => (f64::NAN, f64::NAN),
    };
    let (on_sps, on_reset) = steps_per_second(
        &mut WasmEnv::new(&p_on, "", Grants::default())?,
        args.steps,
        text,
    )?;
    let (off_sps, _) = steps_per_second(
        &mut WasmEnv::new(&p_off, "", Grants::default())?,
        args.steps,
        text,
    )?;
    Ok(Some(serde_json::json!({
        "env": name,
        "native_steps_per_second": native_sps,
        "sandbox_fuel_steps_per_second": on_sps,
        "sandbox_nofuel_steps_per_second": off_sps,
        "slowdown_fuel": native_sps / on_sps,
        "slowdown_nofuel": native_sps / off_sps,
        "sandbox_fuel_step_us": 1e6 / on_sps,
        "native_reset_us": native_reset,
        "sandbox_fuel_reset_us": on_reset,
        "fresh_instance_fuel_us": fresh_instance_us(&p_on, args.instances)?,
        "fresh_instance_nofuel_us": fresh_instance_us(&p_off, args.instances)?,
    })))
}

/// The table's header and one row per env.
fn print_header() {
    println!(
        "{:<11} {:>10} {:>11} {:>11} {:>7} {:>7} {:>9} {:>10} {:>11} {:>11}",
        "env",
        "native/s",
        "wasm fuel/s",
        "nofuel/s",
        "x fuel",
        "x nofl",
        "step fuel",
        "reset n/w",
        "fresh fuel",
        "fresh nofl"
    );
}

fn print_row(row: &serde_json::Value) {
    let f = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<11} {:>10.0} {:>11.0} {:>11.0} {:>7.1} {:>7.1} {:>7.2}µs {:>4.0}/{:<4.0}µs {:>9.1}µs {:>9.1}µs",
        row["env"].as_str().unwrap_or("?"),
        f("native_steps_per_second"),
        f("sandbox_fuel_steps_per_second"),
        f("sandbox_nofuel_steps_per_second"),
        f("slowdown_fuel"),
        f("slowdown_nofuel"),
        f("sandbox_fuel_step_us"),
        f("native_reset_us"),
        f("sandbox_fuel_reset_us"),
        f("fresh_instance_fuel_us"),
        f("fresh_instance_nofuel_us")
    );
}

/// Run `bench envs`.
pub fn run(args: EnvsArgs) -> anyhow::Result<()> {
    let base = SandboxConfig {
        cache_dir: None,
        max_instances: 64,
        ..SandboxConfig::default()
    };
    let fuel_on = Sandbox::new(SandboxConfig {
        fuel: true,
        ..base.clone()
    })?;
    let fuel_off = Sandbox::new(SandboxConfig {
        fuel: false,
        ..base
    })?;
    if !args.json {
        print_header();
    }
    let mut rows = Vec::new();
    // The built-ins (or those named), in registry order.
    for builtin in ragen_gym_builtins::BUILTINS {
        if !args.envs.is_empty() && !args.envs.iter().any(|e| builtin.answers_to(e)) {
            continue;
        }
        let mut native_env = builtin.native.map(|native| native("")).transpose()?;
        let Some(row) = measure(
            builtin.name,
            builtin.wasm,
            native_env.as_deref_mut(),
            [&fuel_on, &fuel_off],
            &args,
        )?
        else {
            continue;
        };
        if !args.json {
            print_row(&row);
        }
        rows.push(row);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "steps": args.steps, "instances": args.instances, "envs": rows })
            )?
        );
    } else {
        println!(
            "(steps/s time step calls only; x = native/sandbox slowdown; reset n/w = native/wasm reset µs; fresh = new instance + constructor + reset)"
        );
    }
    Ok(())
}
