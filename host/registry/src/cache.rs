//! [`PluginCache`]: verified downloads stored by content digest, `<dir>/sha256/<hex>.wasm`, and
//! OCI manifests fetched by digest, `<dir>/oci-manifests/sha256/<hex>.json`.
//!
//! Entries are written only after verification, atomically: a temp file in the same directory,
//! `fsync`, `rename`, then `fsync` of the directory. A reader re-hashes what it reads and ignores
//! (and removes) an entry whose content does not match its name, so a damaged disk cannot hand
//! out wrong bytes.

use crate::digest::Digest;
use crate::error::RegistryError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The plugin download cache.
#[derive(Debug, Clone)]
pub struct PluginCache {
    dir: PathBuf,
}

/// What a cache entry holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A component (`.wasm`).
    Component,
    /// A raw OCI image manifest (`.json`), stored under its own digest.
    OciManifest,
}

impl PluginCache {
    /// A cache rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$RAGEN_GYM_CACHE/plugins`, else `~/.cache/ragen-gym/plugins`.
    pub fn default_dir() -> Option<PathBuf> {
        Some(ragen_gym_core::cache_root()?.join("plugins"))
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn path(&self, kind: Kind, digest: &Digest) -> PathBuf {
        match kind {
            Kind::Component => self
                .dir
                .join("sha256")
                .join(format!("{}.wasm", digest.hex())),
            Kind::OciManifest => self
                .dir
                .join("oci-manifests/sha256")
                .join(format!("{}.json", digest.hex())),
        }
    }

    /// The component with `digest`, if cached and intact.
    pub fn get(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.get_kind(Kind::Component, digest)
    }

    pub(crate) fn get_kind(&self, kind: Kind, digest: &Digest) -> Option<Vec<u8>> {
        let path = self.path(kind, digest);
        let bytes = std::fs::read(&path).ok()?;
        if Digest::of(&bytes) == *digest {
            Some(bytes)
        } else {
            tracing::warn!(path = %path.display(), "removing a cache entry whose content does not match its digest");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Store verified `bytes` (their digest is computed here, not trusted from the caller).
    ///
    /// # Errors
    /// [`RegistryError::Cache`]; no partial file is left behind.
    pub fn put(&self, bytes: &[u8]) -> Result<Digest, RegistryError> {
        let d = Digest::of(bytes);
        self.put_kind(Kind::Component, &d, bytes)?;
        Ok(d)
    }

    pub(crate) fn put_kind(
        &self,
        kind: Kind,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<PathBuf, RegistryError> {
        let path = self.path(kind, digest);
        if path.is_file() && self.get_kind(kind, digest).is_some() {
            return Ok(path);
        }
        write_atomic(&path, bytes).map_err(|source| RegistryError::Cache {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

/// Write `bytes` to `path` atomically and durably: temp file in the same directory, fsync,
/// rename, fsync of the directory. On any failure the temp file is removed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_named_by_digest_and_checked_on_read() {
        let d = tempfile::tempdir().unwrap();
        let cache = PluginCache::new(d.path());
        let digest = cache.put(b"abc").unwrap();
        assert_eq!(cache.get(&digest).as_deref(), Some(&b"abc"[..]));
        let path = cache.path(Kind::Component, &digest);
        assert!(path.ends_with(format!("sha256/{}.wasm", digest.hex())));
        // a damaged entry is not handed out, and is removed
        std::fs::write(&path, b"abd").unwrap();
        assert!(cache.get(&digest).is_none());
        assert!(!path.exists());
        // no temp files are left
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }
}
