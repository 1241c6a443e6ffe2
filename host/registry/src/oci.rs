//! The OCI side, over `oci-client`: pull a Wasm artifact's manifest and layer, push one.

use crate::artifact::{
    OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, WasmConfig,
};
use crate::digest::Digest;
use crate::error::RegistryError;
use crate::fetch::chain;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::collections::BTreeMap;
use std::time::Duration;

/// Registry credentials: `RAGEN_GYM_REGISTRY_USERNAME` and `RAGEN_GYM_REGISTRY_PASSWORD` when
/// both are set (HTTP basic, or exchanged for a token by registries that use token auth), else
/// anonymous.
pub(crate) fn auth() -> RegistryAuth {
    match (
        std::env::var("RAGEN_GYM_REGISTRY_USERNAME"),
        std::env::var("RAGEN_GYM_REGISTRY_PASSWORD"),
    ) {
        (Ok(u), Ok(p)) if !u.is_empty() => RegistryAuth::Basic(u, p),
        _ => RegistryAuth::Anonymous,
    }
}

/// A client speaking HTTPS except to the `insecure` registries (`HOST:PORT`).
pub(crate) fn client(insecure: &[String], connect: Duration, read: Duration) -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(insecure.to_vec()),
        connect_timeout: Some(connect),
        read_timeout: Some(read),
        // A single artifact manifest is expected; an index is refused in `check_manifest`.
        platform_resolver: None,
        ..ClientConfig::default()
    })
}

/// Map an oci-client error for `reference` (on `registry`, `insecure` when granted plain HTTP).
pub(crate) fn map_err(
    reference: &str,
    registry: &str,
    insecure: bool,
    e: OciDistributionError,
) -> RegistryError {
    let not_found = |reason: String| RegistryError::NotFound {
        reference: reference.to_string(),
        reason,
    };
    match e {
        OciDistributionError::RequestError(ref r) if r.is_connect() || r.is_timeout() => {
            let hint = if insecure {
                ""
            } else {
                " (a plain-HTTP registry needs --insecure-registry HOST:PORT)"
            };
            RegistryError::Unreachable {
                url: format!("registry {registry}"),
                reason: format!("{}{hint}", chain(r)),
            }
        }
        OciDistributionError::RequestError(ref r) if r.is_body() || r.is_decode() => {
            RegistryError::Truncated {
                url: reference.to_string(),
                expected: None,
                received: 0,
            }
        }
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
            expected,
            actual,
        }) => RegistryError::DigestMismatch {
            reference: reference.to_string(),
            expected,
            actual,
        },
        OciDistributionError::ImageManifestNotFoundError(m) => not_found(m),
        OciDistributionError::RegistryError { ref envelope, .. }
            if envelope.errors.iter().any(|x| {
                matches!(
                    x.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) =>
        {
            not_found(envelope.to_string())
        }
        OciDistributionError::ServerError { code: 404, .. } => not_found("HTTP 404".into()),
        other => RegistryError::Registry {
            reference: reference.to_string(),
            reason: chain(&other),
        },
    }
}

/// Check that `manifest` is a Wasm OCI artifact and return its one layer.
pub(crate) fn check_manifest<'a>(
    reference: &str,
    manifest: &'a OciImageManifest,
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
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => Ok(layer),
        [layer] => Err(bad(format!(
            "layer media type is `{}`, not `{WASM_LAYER_MEDIA_TYPE}`",
            layer.media_type
        ))),
        layers => Err(bad(format!(
            "{} layers, the format has exactly one",
            layers.len()
        ))),
    }
}

/// Parse a raw manifest (after oci-client checked its digest).
pub(crate) fn parse_manifest(
    reference: &str,
    raw: &[u8],
) -> Result<OciImageManifest, RegistryError> {
    serde_json::from_slice(raw).map_err(|e| RegistryError::NotAWasmArtifact {
        reference: reference.to_string(),
        reason: format!("not an OCI image manifest: {e}"),
    })
}

/// The raw manifest of `image` and its digest (checked against the reference's digest, if any,
/// by oci-client).
pub(crate) async fn pull_manifest(
    client: &Client,
    image: &Reference,
) -> Result<(Vec<u8>, String), OciDistributionError> {
    let (raw, digest) = client
        .pull_manifest_raw(image, &auth(), &[OCI_MANIFEST_MEDIA_TYPE])
        .await?;
    Ok((raw.to_vec(), digest))
}

/// Download the layer `desc` of `image` (oci-client checks it against the descriptor's digest).
pub(crate) async fn pull_layer(
    client: &Client,
    image: &Reference,
    desc: &OciDescriptor,
) -> Result<Vec<u8>, OciDistributionError> {
    let mut out = Vec::with_capacity(usize::try_from(desc.size).unwrap_or(0));
    client.pull_blob(image, desc, &mut out).await?;
    Ok(out)
}

/// Push `component` as a Wasm OCI artifact to `image` (a tag). Returns the manifest's digest.
pub(crate) async fn push(
    client: &Client,
    image: &Reference,
    component: &[u8],
    config: &WasmConfig,
    annotations: BTreeMap<String, String>,
) -> Result<Digest, OciDistributionError> {
    let layer = ImageLayer::new(component.to_vec(), WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let config = Config::new(
        serde_json::to_vec(config)?,
        WASM_CONFIG_MEDIA_TYPE.to_string(),
        None,
    );
    let mut manifest =
        OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
    manifest.schema_version = 2;
    manifest.media_type = Some(OCI_MANIFEST_MEDIA_TYPE.to_string());
    client
        .store_auth_if_needed(image.resolve_registry(), &auth())
        .await;
    client
        .push_blob(image, layer.data.clone(), &manifest.layers[0].digest)
        .await?;
    client
        .push_blob(image, config.data.clone(), &manifest.config.digest)
        .await?;
    let body = serde_json::to_vec(&manifest)?;
    let digest = Digest::of(&body);
    client
        .push_manifest_raw(
            image,
            body,
            reqwest::header::HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
        )
        .await?;
    Ok(digest)
}
