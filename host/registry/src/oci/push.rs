//! Pushing a Wasm artifact (OCI Distribution Specification v1.1, "Pushing blobs", the
//! monolithic `POST` then `PUT ?digest=`, and "Pushing Manifests"): the layer and the config
//! blob (skipped when the registry has them), then the manifest under its tag.

use super::session::{Session, value};
use crate::artifact::OCI_MANIFEST_MEDIA_TYPE;
use crate::error::RegistryError;
use ragen_gym_net::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, LOCATION};
use ragen_gym_net::{Method, Url};

impl Session<'_> {
    /// Upload `blob` with `digest` unless the registry has it.
    pub(crate) async fn push_blob(
        &mut self,
        blob: bytes::Bytes,
        digest: &str,
    ) -> Result<(), RegistryError> {
        let head = self.url(&format!("blobs/{digest}"))?;
        let resp = self
            .send(Method::HEAD, &head, &HeaderMap::new(), None)
            .await?;
        if resp.status() == 200 {
            return Ok(());
        }
        let start = self.url("blobs/uploads/")?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, value("0"));
        let resp = self.send(Method::POST, &start, &headers, None).await?;
        if resp.status() != 202 {
            return Err(self.status_error("upload session", resp).await);
        }
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Registry {
                reference: self.reference.clone(),
                reason: "the upload session has no Location".into(),
            })?
            .to_string();
        let mut upload: Url = start.join(&location).map_err(|e| RegistryError::Registry {
            reference: self.reference.clone(),
            reason: format!("bad upload Location {location:?}: {e}"),
        })?;
        upload.query_pairs_mut().append_pair("digest", digest);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, value("application/octet-stream"));
        headers.insert(CONTENT_LENGTH, value(&blob.len().to_string()));
        let resp = self
            .send(Method::PUT, &upload, &headers, Some(&blob))
            .await?;
        if resp.status() != 201 {
            return Err(self.status_error("blob upload", resp).await);
        }
        Ok(())
    }

    /// Put `manifest` (an OCI image manifest) under `tag`.
    pub(crate) async fn push_manifest(
        &mut self,
        tag: &str,
        manifest: bytes::Bytes,
    ) -> Result<(), RegistryError> {
        let url = self.url(&format!("manifests/{tag}"))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, value(OCI_MANIFEST_MEDIA_TYPE));
        let resp = self
            .send(Method::PUT, &url, &headers, Some(&manifest))
            .await?;
        if resp.status() != 201 {
            return Err(self.status_error("manifest upload", resp).await);
        }
        Ok(())
    }
}
