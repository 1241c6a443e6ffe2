//! `ragen-gym inspect PLUGIN [--json]`: the manifest, interface version, sha256 and capabilities
//! of a plugin, read without running any plugin code.

use crate::shared::plugins::fetch_and_inspect;
use crate::shared::source::SourceArgs;

/// Arguments of `ragen-gym inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// A built-in name (`bandit`, `sokoban`, `frozenlake`), a `.wasm` component file, a pinned
    /// `https://…#sha256=<hex>` URL or an `oci://registry/namespace/name:tag` reference.
    pub plugin: String,
    /// Print JSON (keys `id`, `version`, `interface_version`, `sha256`, `capabilities`, ...).
    #[arg(long)]
    pub json: bool,
    /// Where plugins may come from.
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (_, info) = fetch_and_inspect(&args.plugin, &args.source)?;
    let m = &info.manifest;
    if args.json {
        let v = serde_json::json!({
            "id": m.id,
            "version": m.version,
            "interface_version": m.interface_version,
            "kind": m.kind,
            "description": m.description,
            "sha256": info.sha256,
            "size_bytes": info.size_bytes,
            "min_memory_bytes": info.min_memory_bytes,
            "capabilities": m.capabilities,
            "limits": m.limits,
            "imports": info.imports,
            "exports": info.exports,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("id:                {}", m.id);
        println!("version:           {}", m.version);
        println!(
            "kind:              {}",
            serde_json::to_value(m.kind)?.as_str().unwrap_or("?")
        );
        println!(
            "interface version: {} (host supports {})",
            m.interface_version,
            ragen_gym_core::version::supported_interface()
        );
        println!("description:       {}", m.description);
        println!("sha256:            {}", info.sha256);
        println!("size:              {} bytes", info.size_bytes);
        let default_cap = ragen_gym_sandbox::SandboxConfig::default().memory_bytes;
        let cap = m
            .limits
            .memory_bytes
            .map_or(default_cap, |l| l.min(default_cap));
        println!(
            "min memory:        {} bytes ({}; cap by default {} bytes{})",
            info.min_memory_bytes,
            if info.min_memory_bytes <= cap {
                "fits"
            } else {
                "OVER THE CAP: raise --memory-mib"
            },
            cap,
            if m.limits.memory_bytes.is_some() {
                ", lowered by the manifest"
            } else {
                ""
            }
        );
        let http = if m.capabilities.http.is_empty() {
            "none".to_string()
        } else {
            m.capabilities.http.join(", ")
        };
        println!(
            "capabilities:      http: {http}; clock: {}; random: {}",
            m.capabilities.clock, m.capabilities.random
        );
        println!("imports:           {}", info.imports.join(", "));
        println!("exports:           {}", info.exports.join(", "));
    }
    Ok(())
}
