//! [`Resolver`]: a [`PluginRef`] to verified component bytes, through the [`PluginCache`]; and
//! [`Resolver::publish`], a component to an OCI registry.

use crate::artifact::{WasmComponentInfo, WasmConfig, check_component};
use crate::cache::{Kind, PluginCache};
use crate::digest::Digest;
use crate::error::{InvalidReference, RegistryError};
use crate::fetch::download;
use crate::oci::{Session, check_manifest, parse_manifest};
use crate::reference::PluginRef;
use oci_client::Reference;
use ragen_gym_core::read_plugin_file;
use ragen_gym_net::{Client, Grants, Limits};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What the user allows.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// Accept an `http(s)://` URL without a `#sha256=` pin (`--allow-unpinned`).
    pub allow_unpinned: bool,
    /// `HOST:PORT`s the user granted (`--insecure-registry`): reachable over plain HTTP
    /// (`http://` URLs, OCI registries, redirect hops), and the only hosts an OCI layer's
    /// foreign URLs may name. HTTPS is allowed to any host.
    pub insecure_hosts: Vec<String>,
    /// The bounds of every download: the byte cap is the largest plugin accepted (local files
    /// included), with the overall deadline and the minimum rate.
    pub limits: Limits,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            allow_unpinned: false,
            insecure_hosts: Vec::new(),
            limits: Limits::DOWNLOAD,
        }
    }
}

impl ResolveOptions {
    /// The hosts a download may contact.
    pub fn grants(&self) -> Grants {
        Grants::https_or(self.insecure_hosts.clone(), "--insecure-registry")
    }
}

/// Where resolved bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A local file.
    Path(PathBuf),
    /// The cache (no network request for the component).
    Cache,
    /// Downloaded now.
    Network,
}

/// A resolved plugin: verified component bytes and their identity.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The reference, normalised (`PluginRef`'s display form).
    pub reference: String,
    /// The component.
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`.
    pub digest: Digest,
    /// For an OCI reference, the digest of the manifest it resolved to.
    pub oci_manifest: Option<Digest>,
    /// Where the bytes came from.
    pub origin: Origin,
}

/// A pushed artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// `oci://registry/repository:tag`.
    pub reference: String,
    /// The manifest digest: `oci://registry/repository@<manifest>` pins it.
    pub manifest: Digest,
    /// The component's digest (the layer).
    pub layer: Digest,
}

impl Published {
    /// The reference pinned by manifest digest.
    pub fn pinned_reference(&self) -> String {
        let base = self
            .reference
            .rsplit_once(':')
            .map_or(self.reference.as_str(), |(b, tag)| {
                if tag.contains('/') {
                    &self.reference
                } else {
                    b
                }
            });
        format!("{base}@{}", self.manifest)
    }
}

/// Resolves plugin references. Network work runs on a current-thread tokio runtime owned by the
/// resolver, started on first use; the methods block.
pub struct Resolver {
    cache: PluginCache,
    options: ResolveOptions,
    runtime: OnceLock<tokio::runtime::Runtime>,
    net: OnceLock<Client>,
}

impl Resolver {
    /// A resolver over `cache` with `options`.
    pub fn new(cache: PluginCache, options: ResolveOptions) -> Self {
        Self {
            cache,
            options,
            runtime: OnceLock::new(),
            net: OnceLock::new(),
        }
    }

    /// The cache.
    pub fn cache(&self) -> &PluginCache {
        &self.cache
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, RegistryError> {
        if let Some(rt) = self.runtime.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RegistryError::Runtime)?;
        Ok(self.runtime.get_or_init(|| rt))
    }

    /// The bounded client, built on first use.
    fn net(&self) -> Result<&Client, RegistryError> {
        if let Some(c) = self.net.get() {
            return Ok(c);
        }
        let c = Client::new(self.options.grants(), self.options.limits)?;
        Ok(self.net.get_or_init(|| c))
    }

    fn insecure(&self, host_port: &str) -> bool {
        self.options.insecure_hosts.iter().any(|h| h == host_port)
    }

    /// Resolve `reference` to verified component bytes. `locked` is the digest a lock file
    /// records for it (and the lock file's path, for the message): anything else is refused.
    ///
    /// # Errors
    /// Any [`RegistryError`]; on error nothing is written to the cache.
    pub fn resolve(
        &self,
        reference: &PluginRef,
        locked: Option<(&Digest, &Path)>,
    ) -> Result<Resolved, RegistryError> {
        let shown = reference.to_string();
        let check_lock = |found: &Digest| match locked {
            Some((l, lock)) if l != found => Err(RegistryError::LockMismatch {
                reference: shown.clone(),
                locked: *l,
                found: *found,
                lock: lock.to_path_buf(),
            }),
            _ => Ok(()),
        };
        match reference {
            PluginRef::Path(path) => {
                let bytes = read_plugin_file(path, self.options.limits.max_bytes)?;
                let digest = Digest::of(&bytes);
                check_lock(&digest)?;
                check_component(&shown, &bytes)?;
                Ok(Resolved {
                    reference: shown,
                    bytes,
                    digest,
                    oci_manifest: None,
                    origin: Origin::Path(path.clone()),
                })
            }
            PluginRef::Url { url, pin } => {
                let host = reference.host_port().unwrap_or_default();
                if url.scheme() == "http" && !self.insecure(&host) {
                    return Err(RegistryError::InsecureHost { url: shown, host });
                }
                if let Some(p) = pin {
                    check_lock(p)?;
                }
                let expected = pin.or(locked.map(|(d, _)| *d));
                if expected.is_none() && !self.options.allow_unpinned {
                    return Err(RegistryError::Unpinned { url: shown });
                }
                if let Some(e) = expected
                    && let Some(bytes) = self.cache.get(&e)
                {
                    return Ok(Resolved {
                        reference: shown,
                        bytes,
                        digest: e,
                        oci_manifest: None,
                        origin: Origin::Cache,
                    });
                }
                let bytes = self.download(url)?;
                let digest = Digest::of(&bytes);
                if let Some(p) = pin
                    && digest != *p
                {
                    return Err(RegistryError::DigestMismatch {
                        reference: shown,
                        expected: p.to_string(),
                        actual: digest.to_string(),
                    });
                }
                check_lock(&digest)?;
                check_component(&shown, &bytes)?;
                self.cache.put(&bytes)?;
                Ok(Resolved {
                    reference: shown,
                    bytes,
                    digest,
                    oci_manifest: None,
                    origin: Origin::Network,
                })
            }
            PluginRef::Oci(image) => self.resolve_oci(image, &shown, &check_lock),
        }
    }

    fn download(&self, url: &ragen_gym_net::Url) -> Result<Vec<u8>, RegistryError> {
        let net = self.net()?;
        self.runtime()?.block_on(download(net, url))
    }

    fn resolve_oci(
        &self,
        image: &Reference,
        shown: &str,
        check_lock: &dyn Fn(&Digest) -> Result<(), RegistryError>,
    ) -> Result<Resolved, RegistryError> {
        let registry = image.registry().to_string();
        let net = self.net()?;
        let rt = self.runtime()?;
        let mut session = Session::new(
            net,
            shown,
            &registry,
            image.repository(),
            self.insecure(&registry),
            "pull",
        )?;
        // A manifest named by digest is immutable: take it from the cache when we have it.
        let pinned_manifest =
            image
                .digest()
                .map(Digest::parse)
                .transpose()
                .map_err(|e| InvalidReference {
                    reference: shown.to_string(),
                    reason: e.to_string(),
                })?;
        let cached_manifest = pinned_manifest
            .as_ref()
            .and_then(|d| self.cache.get_kind(Kind::OciManifest, d).map(|m| (m, *d)));
        let (raw, manifest_digest) = match cached_manifest {
            Some(m) => m,
            None => rt.block_on(session.pull_manifest(image))?,
        };
        let manifest = parse_manifest(shown, &raw)?;
        let layer = check_manifest(shown, &manifest, net.grants())?;
        let layer_digest =
            Digest::parse(&layer.digest).map_err(|e| RegistryError::NotAWasmArtifact {
                reference: shown.to_string(),
                reason: format!("layer digest: {e}"),
            })?;
        check_lock(&layer_digest)?;
        let (bytes, origin) = match self.cache.get(&layer_digest) {
            Some(b) => (b, Origin::Cache),
            None => {
                let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
                if size > self.options.limits.max_bytes {
                    return Err(RegistryError::TooLarge {
                        url: shown.to_string(),
                        limit: self.options.limits.max_bytes,
                    });
                }
                let bytes = rt.block_on(session.pull_layer(layer, size))?;
                let got = Digest::of(&bytes);
                if got != layer_digest {
                    return Err(RegistryError::DigestMismatch {
                        reference: shown.to_string(),
                        expected: layer_digest.to_string(),
                        actual: got.to_string(),
                    });
                }
                check_component(shown, &bytes)?;
                self.cache.put(&bytes)?;
                (bytes, Origin::Network)
            }
        };
        if pinned_manifest.is_some() {
            self.cache
                .put_kind(Kind::OciManifest, &manifest_digest, &raw)?;
        }
        Ok(Resolved {
            reference: shown.to_string(),
            bytes,
            digest: layer_digest,
            oci_manifest: Some(manifest_digest),
            origin,
        })
    }

    /// Push `component` to `reference` (an `oci://…:tag`) as a Wasm OCI artifact, with
    /// `component_info` in its config and `annotations` (e.g. `org.opencontainers.image.version`)
    /// on its manifest.
    ///
    /// # Errors
    /// [`RegistryError::NotAComponent`] before any request; registry failures as for
    /// [`Resolver::resolve`].
    pub fn publish(
        &self,
        component: &[u8],
        reference: &PluginRef,
        component_info: WasmComponentInfo,
        annotations: BTreeMap<String, String>,
    ) -> Result<Published, RegistryError> {
        let shown = reference.to_string();
        let PluginRef::Oci(image) = reference else {
            return Err(InvalidReference {
                reference: shown,
                reason: "publish needs an `oci://registry/namespace/name:tag` reference".into(),
            }
            .into());
        };
        if image.digest().is_some() {
            return Err(InvalidReference {
                reference: shown,
                reason: "publish to a tag; the registry gives the digest".into(),
            }
            .into());
        }
        check_component(&shown, component)?;
        let layer = Digest::of(component);
        let config = WasmConfig::for_component(&layer, component_info);
        let registry = image.registry().to_string();
        let tag = image.tag().unwrap_or("latest").to_string();
        let mut session = Session::new(
            self.net()?,
            &shown,
            &registry,
            image.repository(),
            self.insecure(&registry),
            "pull,push",
        )?;
        let manifest = self.runtime()?.block_on(async {
            let body = wasm_manifest(component, &config, annotations)?;
            session
                .push_blob(bytes::Bytes::copy_from_slice(component), &layer.to_string())
                .await?;
            session
                .push_blob(body.config.clone(), &body.config_digest.to_string())
                .await?;
            session.push_manifest(&tag, body.manifest.clone()).await?;
            Ok::<_, RegistryError>(Digest::of(&body.manifest))
        })?;
        Ok(Published {
            reference: shown,
            manifest,
            layer,
        })
    }
}

/// A Wasm artifact's config blob and manifest, serialised.
struct ArtifactBody {
    config: bytes::Bytes,
    config_digest: Digest,
    manifest: bytes::Bytes,
}

/// The config and the OCI image manifest of `component` (one `application/wasm` layer) with
/// `annotations`.
fn wasm_manifest(
    component: &[u8],
    config: &WasmConfig,
    annotations: BTreeMap<String, String>,
) -> Result<ArtifactBody, RegistryError> {
    use crate::artifact::{OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
    use oci_client::manifest::{OciDescriptor, OciImageManifest};
    let json = |e: serde_json::Error| RegistryError::Registry {
        reference: String::new(),
        reason: format!("failed to serialise the artifact: {e}"),
    };
    let config = bytes::Bytes::from(serde_json::to_vec(config).map_err(json)?);
    let config_digest = Digest::of(&config);
    let desc = |media: &str, digest: &Digest, size: usize| OciDescriptor {
        media_type: media.to_string(),
        digest: digest.to_string(),
        size: i64::try_from(size).unwrap_or(i64::MAX),
        ..OciDescriptor::default()
    };
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_string()),
        config: desc(WASM_CONFIG_MEDIA_TYPE, &config_digest, config.len()),
        layers: vec![desc(
            WASM_LAYER_MEDIA_TYPE,
            &Digest::of(component),
            component.len(),
        )],
        annotations: Some(annotations),
        ..OciImageManifest::default()
    };
    Ok(ArtifactBody {
        config,
        config_digest,
        manifest: serde_json::to_vec(&manifest).map_err(json)?.into(),
    })
}
