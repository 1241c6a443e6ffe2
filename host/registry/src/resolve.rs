//! [`Resolver`]: a [`PluginRef`] to verified component bytes, through the [`PluginCache`]; and
//! [`Resolver::publish`], a component to an OCI registry.

use crate::artifact::{WasmComponentInfo, WasmConfig, check_component};
use crate::cache::{Kind, PluginCache};
use crate::digest::Digest;
use crate::error::{InvalidReference, RegistryError};
use crate::fetch::download;
use crate::oci;
use crate::reference::PluginRef;
use oci_client::Reference;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// What the user allows.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// Accept an `http(s)://` URL without a `#sha256=` pin (`--allow-unpinned`).
    pub allow_unpinned: bool,
    /// `HOST:PORT`s reachable over plain HTTP: `http://` URLs and OCI registries
    /// (`--insecure-registry`).
    pub insecure_hosts: Vec<String>,
    /// Connect timeout per request.
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    pub read_timeout: Duration,
    /// Largest plugin accepted, bytes.
    pub max_bytes: u64,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            allow_unpinned: false,
            insecure_hosts: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            max_bytes: 256 << 20,
        }
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
    http: OnceLock<reqwest::Client>,
}

impl Resolver {
    /// A resolver over `cache` with `options`.
    pub fn new(cache: PluginCache, options: ResolveOptions) -> Self {
        Self {
            cache,
            options,
            runtime: OnceLock::new(),
            http: OnceLock::new(),
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

    fn http(&self, url: &str) -> Result<&reqwest::Client, RegistryError> {
        if let Some(c) = self.http.get() {
            return Ok(c);
        }
        let c = reqwest::Client::builder()
            .connect_timeout(self.options.connect_timeout)
            .read_timeout(self.options.read_timeout)
            .build()
            .map_err(|e| RegistryError::Unreachable {
                url: url.to_string(),
                reason: format!("failed to build the HTTP client: {e}"),
            })?;
        Ok(self.http.get_or_init(|| c))
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
                let bytes = std::fs::read(path).map_err(|source| RegistryError::Read {
                    path: path.clone(),
                    source,
                })?;
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

    fn download(&self, url: &reqwest::Url) -> Result<Vec<u8>, RegistryError> {
        let client = self.http(url.as_str())?;
        self.runtime()?
            .block_on(download(client, url, self.options.max_bytes))
    }

    fn resolve_oci(
        &self,
        image: &Reference,
        shown: &str,
        check_lock: &dyn Fn(&Digest) -> Result<(), RegistryError>,
    ) -> Result<Resolved, RegistryError> {
        let registry = image.registry().to_string();
        let insecure = self.insecure(&registry);
        let map = |e| oci::map_err(shown, &registry, insecure, e);
        let client = oci::client(
            &self.options.insecure_hosts,
            self.options.connect_timeout,
            self.options.read_timeout,
        );
        let rt = self.runtime()?;
        // A manifest named by digest is immutable: take it from the cache when we have it.
        let pinned_manifest = image
            .digest()
            .map(Digest::parse)
            .transpose()
            .map_err(|reason| InvalidReference {
                reference: shown.to_string(),
                reason,
            })?;
        let cached_manifest = pinned_manifest
            .as_ref()
            .and_then(|d| self.cache.get_kind(Kind::OciManifest, d).map(|m| (m, *d)));
        let (raw, manifest_digest) = match cached_manifest {
            Some(m) => m,
            None => {
                let (raw, digest) = rt
                    .block_on(oci::pull_manifest(&client, image))
                    .map_err(map)?;
                let digest = Digest::parse(&digest).map_err(|reason| RegistryError::Registry {
                    reference: shown.to_string(),
                    reason: format!("the registry sent a bad manifest digest: {reason}"),
                })?;
                (raw, digest)
            }
        };
        let manifest = oci::parse_manifest(shown, &raw)?;
        let layer = oci::check_manifest(shown, &manifest)?;
        let layer_digest =
            Digest::parse(&layer.digest).map_err(|reason| RegistryError::NotAWasmArtifact {
                reference: shown.to_string(),
                reason: format!("layer digest: {reason}"),
            })?;
        check_lock(&layer_digest)?;
        let (bytes, origin) = match self.cache.get(&layer_digest) {
            Some(b) => (b, Origin::Cache),
            None => {
                let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
                if size > self.options.max_bytes {
                    return Err(RegistryError::TooLarge {
                        url: shown.to_string(),
                        limit: self.options.max_bytes,
                    });
                }
                let bytes = rt
                    .block_on(oci::pull_layer(&client, image, layer))
                    .map_err(map)?;
                if bytes.len() as u64 != size {
                    return Err(RegistryError::Truncated {
                        url: shown.to_string(),
                        expected: Some(size),
                        received: bytes.len() as u64,
                    });
                }
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
        let insecure = self.insecure(&registry);
        let client = oci::client(
            &self.options.insecure_hosts,
            self.options.connect_timeout,
            self.options.read_timeout,
        );
        let manifest = self
            .runtime()?
            .block_on(oci::push(&client, image, component, &config, annotations))
            .map_err(|e| oci::map_err(&shown, &registry, insecure, e))?;
        Ok(Published {
            reference: shown,
            manifest,
            layer,
        })
    }
}
