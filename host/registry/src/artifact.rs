//! The CNCF Wasm OCI artifact format (CNCF TAG Runtime "Wasm OCI Artifact layout"; the format
//! `wkg` and wasm-pkg-tools push and pull): an OCI image manifest whose config has media type
//! `application/vnd.wasm.config.v0+json` and whose single layer is the component,
//! `application/wasm`. The config records the architecture (`wasm`), the OS (`wasip2` for a
//! component), the layer digests and the component's imports and exports.

use crate::digest::Digest;
use crate::error::RegistryError;
use serde::{Deserialize, Serialize};

/// Media type of the artifact's config.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the artifact's one layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Media type of the manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// The artifact's config blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339 creation time.
    pub created: String,
    /// Who built it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip2` for a component.
    pub os: String,
    /// The digests of the manifest's layers, in order.
    pub layer_digests: Vec<String>,
    /// What the component imports and exports.
    pub component: Option<WasmComponentInfo>,
}

/// The component section of [`WasmConfig`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WasmComponentInfo {
    /// Exported interface names (`ragen:gym/environment@0.1.0`, ...).
    pub exports: Vec<String>,
    /// Imported interface names.
    pub imports: Vec<String>,
    /// The world it targets, when known.
    pub target: Option<String>,
}

impl WasmConfig {
    /// The config of a component layer with `digest`, created now.
    pub fn for_component(digest: &Digest, component: WasmComponentInfo) -> Self {
        Self {
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            author: None,
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![digest.to_string()],
            component: Some(component),
        }
    }
}

/// Refuse bytes that are not a WebAssembly component (a core module, or not wasm at all). Only
/// the 8-byte preamble is read; the sandbox verifies the rest.
///
/// # Errors
/// [`RegistryError::NotAComponent`].
pub fn check_component(reference: &str, bytes: &[u8]) -> Result<(), RegistryError> {
    if wasmparser::Parser::is_component(bytes) {
        return Ok(());
    }
    let reason = if wasmparser::Parser::is_core_wasm(bytes) {
        "it is a core wasm module (build a component, e.g. for wasm32-wasip2)".to_string()
    } else {
        let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!(
            "no wasm component preamble (first bytes: {})",
            if head.is_empty() {
                "none".into()
            } else {
                head.join(" ")
            }
        )
    };
    Err(RegistryError::NotAComponent {
        reference: reference.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_serialises_with_the_artifact_field_names() {
        let d = Digest::of(b"x");
        let mut c = WasmConfig::for_component(
            &d,
            WasmComponentInfo {
                exports: vec!["ragen:gym/environment@0.1.0".into()],
                imports: vec![],
                target: None,
            },
        );
        c.created = "2026-01-01T00:00:00Z".into();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "created": "2026-01-01T00:00:00Z",
                "architecture": "wasm",
                "os": "wasip2",
                "layerDigests": [d.to_string()],
                "component": {"exports": ["ragen:gym/environment@0.1.0"], "imports": [], "target": null}
            })
        );
    }

    #[test]
    fn core_modules_and_junk_are_not_components() {
        // preambles from the binary format: magic, then version 1 layer 0 (core) / 0xd layer 1
        let core = b"\0asm\x01\0\0\0";
        let component = b"\0asm\x0d\0\x01\0";
        assert!(check_component("x", component).is_ok());
        let e = check_component("x", core).unwrap_err().to_string();
        assert!(e.contains("core wasm module"), "{e}");
        let e = check_component("x", b"<html>").unwrap_err().to_string();
        assert!(e.contains("3c 68 74 6d 6c 3e"), "{e}");
    }
}
