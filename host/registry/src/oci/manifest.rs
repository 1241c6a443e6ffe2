//! What a pulled manifest must be: an OCI image manifest in the Wasm OCI artifact format
//! (`crate::artifact`) whose one layer names foreign URLs only on granted hosts.

use crate::artifact::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use crate::error::RegistryError;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use ragen_gym_net::{Grants, Url, host_port, redact_url};

/// Most bytes of a manifest (the OCI Distribution Specification asks registries to accept
/// manifests of at least 4 MiB; a Wasm artifact's is under 1 KiB).
pub(crate) const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Parse a raw manifest (whose digest was checked).
pub(crate) fn parse_manifest(
    reference: &str,
    raw: &[u8],
) -> Result<OciImageManifest, RegistryError> {
    serde_json::from_slice(raw).map_err(|e| RegistryError::NotAWasmArtifact {
        reference: reference.to_string(),
        reason: format!("not an OCI image manifest: {e}"),
    })
}

/// Check that `manifest` is a Wasm OCI artifact and return its one layer. A layer's foreign
/// `urls` (OCI image spec, "Descriptor": other places the blob may be fetched from) are refused
/// unless every one is on a host the user granted: the grant is a promise about which hosts
/// are contacted, whatever the digest.
pub(crate) fn check_manifest<'a>(
    reference: &str,
    manifest: &'a OciImageManifest,
    grants: &Grants,
) -> Result<&'a OciDescriptor, RegistryError> {
    let bad = |reason: String| RegistryError::NotAWasmArtifact {
        reference: reference.to_string(),
        reason,
    };
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(bad(format!(
            "config media type is `{}`, not `{WASM_CONFIG_MEDIA_TYPE}`",
            manifest.config.media_type
        )));
    }
    let layer = match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => layer,
        [layer] => {
            return Err(bad(format!(
                "layer media type is `{}`, not `{WASM_LAYER_MEDIA_TYPE}`",
                layer.media_type
            )));
        }
        layers => {
            return Err(bad(format!(
                "{} layers, the format has exactly one",
                layers.len()
            )));
        }
    };
    for u in layer.urls.iter().flatten() {
        let url = Url::parse(u).map_err(|e| bad(format!("foreign layer URL {u:?}: {e}")))?;
        if !grants.explicitly_granted(&url) || grants.check(&url).is_err() {
            let host = host_port(&url);
            return Err(RegistryError::ForeignLayerRefused {
                reference: reference.to_string(),
                url: redact_url(&url),
                grant: format!("{} {host}", grants.flag),
                host,
            });
        }
    }
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::manifest::OciDescriptor;

    fn manifest(urls: Option<Vec<String>>) -> OciImageManifest {
        let desc = |media: &str| OciDescriptor {
            media_type: media.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 8,
            ..OciDescriptor::default()
        };
        OciImageManifest {
            config: desc(WASM_CONFIG_MEDIA_TYPE),
            layers: vec![OciDescriptor {
                urls,
                ..desc(WASM_LAYER_MEDIA_TYPE)
            }],
            ..OciImageManifest::default()
        }
    }

    #[test]
    fn foreign_layer_urls_need_a_granted_host() {
        let grants = Grants::https_or(vec!["127.0.0.1:5000".into()], "--insecure-registry");
        assert!(check_manifest("r", &manifest(None), &grants).is_ok());
        let ok = manifest(Some(vec!["http://127.0.0.1:5000/blob".into()]));
        assert!(check_manifest("r", &ok, &grants).is_ok());
        for url in ["http://127.0.0.1:5001/blob", "https://cdn.example.org/blob"] {
            let m = manifest(Some(vec![url.into()]));
            let e = check_manifest("r", &m, &grants).unwrap_err();
            assert!(
                matches!(&e, RegistryError::ForeignLayerRefused { url: u, .. } if u == url),
                "{e:?}"
            );
        }
        let e = check_manifest(
            "r",
            &manifest(Some(vec!["https://cdn.example.org/b".into()])),
            &grants,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--insecure-registry cdn.example.org:443") && e.contains("not contacted"),
            "{e}"
        );
    }
}
