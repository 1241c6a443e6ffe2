//! Pulling a Wasm artifact: its manifest (digest checked against the reference's) and its one
//! layer, from the registry or, when the registry cannot serve it, from the layer's granted
//! foreign URLs.

use super::manifest::MAX_MANIFEST_BYTES;
use super::session::{Session, value};
use crate::artifact::OCI_MANIFEST_MEDIA_TYPE;
use crate::digest::Digest;
use crate::error::RegistryError;
use oci_client::Reference;
use oci_client::manifest::OciDescriptor;
use ragen_gym_net::header::{ACCEPT, HeaderMap};
use ragen_gym_net::{Method, Url};

impl Session<'_> {
    /// The raw manifest of `image` and its digest (which must be the reference's, if it names
    /// one).
    pub(crate) async fn pull_manifest(
        &mut self,
        image: &Reference,
    ) -> Result<(Vec<u8>, Digest), RegistryError> {
        let tag_or_digest = image
            .digest()
            .or(image.tag())
            .unwrap_or("latest")
            .to_string();
        let url = self.url(&format!("manifests/{tag_or_digest}"))?;
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, value(OCI_MANIFEST_MEDIA_TYPE));
        let resp = self.send(Method::GET, &url, &headers, None).await?;
        if resp.status() != 200 {
            return Err(self.status_error("manifest", resp).await);
        }
        let raw = resp
            .bytes(MAX_MANIFEST_BYTES)
            .await
            .map_err(|e| self.net_error(e))?;
        let digest = Digest::of(&raw);
        if let Some(pinned) = image.digest()
            && pinned != digest.to_string()
        {
            return Err(RegistryError::DigestMismatch {
                reference: self.reference.clone(),
                expected: pinned.to_string(),
                actual: digest.to_string(),
            });
        }
        Ok((raw, digest))
    }

    /// The bytes of `layer` (`size` of them, at most): from the registry, else from its
    /// foreign URLs (already checked against the grants by `check_manifest`).
    pub(crate) async fn pull_layer(
        &mut self,
        layer: &OciDescriptor,
        size: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let url = self.url(&format!("blobs/{}", layer.digest))?;
        let resp = self
            .send(Method::GET, &url, &HeaderMap::new(), None)
            .await?;
        let resp = if (200..300).contains(&resp.status()) {
            resp
        } else {
            match self.layer_from_foreign_urls(layer).await? {
                Some(r) => r,
                None => return Err(self.status_error("layer", resp).await),
            }
        };
        let bytes = resp.bytes(size).await.map_err(|e| self.net_error(e))?;
        if bytes.len() as u64 != size {
            return Err(RegistryError::Net(ragen_gym_net::NetError::Truncated {
                url: self.reference.clone(),
                expected: Some(size),
                received: bytes.len() as u64,
            }));
        }
        Ok(bytes)
    }

    /// The first foreign URL of `layer` that answers with a success status.
    async fn layer_from_foreign_urls(
        &mut self,
        layer: &OciDescriptor,
    ) -> Result<Option<ragen_gym_net::Response>, RegistryError> {
        for u in layer.urls.iter().flatten() {
            let Ok(url) = Url::parse(u) else { continue };
            // Without credentials: they belong to the registry (CVE-2020-15157).
            let resp = self.send_anonymous(&url).await?;
            if (200..300).contains(&resp.status()) {
                return Ok(Some(resp));
            }
        }
        Ok(None)
    }
}
