//! `ragen-gym publish PLUGIN oci://registry/namespace/name:tag`: push a plugin as a Wasm OCI
//! artifact (config `application/vnd.wasm.config.v0+json`, one `application/wasm` layer, the
//! format `wkg` uses), after verifying it as `inspect` does. Prints the reference pinned by the
//! manifest digest, which is what to give `--env` to run exactly this upload.
//!
//! Credentials come from `RAGEN_GYM_REGISTRY_USERNAME` / `RAGEN_GYM_REGISTRY_PASSWORD`
//! (anonymous without them); a plain-HTTP registry needs `--insecure-registry HOST:PORT`.

use crate::shared::plugins::fetch_and_inspect;
use crate::shared::source::SourceArgs;
use ragen_gym_registry::{PluginRef, WasmComponentInfo};
use std::collections::BTreeMap;

/// Arguments of `ragen-gym publish`.
#[derive(clap::Args)]
pub struct Args {
    /// The plugin to push: a `.wasm` component file or a built-in name.
    pub plugin: String,
    /// Where: `oci://registry/namespace/name:tag`.
    pub reference: String,
    /// Print JSON (keys `reference`, `pinned`, `manifest_digest`, `digest`, `id`, `version`).
    #[arg(long)]
    pub json: bool,
    /// Where plugins may come from (and `--insecure-registry` for the target registry).
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    // Verify as the sandbox will before anything leaves the machine.
    let (src, info) = fetch_and_inspect(&args.plugin, &args.source)?;
    let target: PluginRef = args.reference.parse()?;
    let m = &info.manifest;
    let annotations = BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), m.id.clone()),
        (
            "org.opencontainers.image.version".to_string(),
            m.version.clone(),
        ),
        (
            "org.opencontainers.image.description".to_string(),
            m.description.clone(),
        ),
    ]);
    let component = WasmComponentInfo {
        exports: info.exports.clone(),
        imports: info.imports.clone(),
        target: Some(format!(
            "{}@{}",
            match m.kind {
                ragen_gym_core::PluginKind::Environment => "ragen:gym/env-plugin",
                ragen_gym_core::PluginKind::RewardFunction => "ragen:gym/reward-plugin",
            },
            m.interface_version
        )),
    };
    let published = args
        .source
        .resolver()?
        .publish(&src.bytes, &target, component, annotations)?;
    if args.json {
        let v = serde_json::json!({
            "reference": published.reference,
            "pinned": published.pinned_reference(),
            "manifest_digest": published.manifest.to_string(),
            "digest": published.layer.to_string(),
            "id": m.id,
            "version": m.version,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("pushed {} {} as {}", m.id, m.version, published.reference);
        println!("component digest  {}", published.layer);
        println!("manifest digest   {}", published.manifest);
        println!("run it pinned:    --env {}", published.pinned_reference());
    }
    Ok(())
}
