//! `ragen-gym.lock`: the plugins a run used, each with its reference, digest, manifest id,
//! version and interface version (TOML, one `[[plugin]]` table each). `train` and `eval` write
//! it into the run directory; `--locked FILE` makes a later run refuse any plugin whose digest
//! differs (after Cargo's `Cargo.lock` / `--locked`).

use crate::cache::write_atomic;
use crate::digest::Digest;
use crate::error::LockError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// The lock file's name in a run directory.
pub const LOCK_FILE_NAME: &str = "ragen-gym.lock";

/// The format version this crate writes and reads.
pub const LOCK_FORMAT_VERSION: u32 = 1;

/// What a plugin is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginRole {
    /// The environment (`--env`).
    Env,
    /// A reward function (`--reward-plugin`).
    Reward,
}

impl fmt::Display for PluginRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginRole::Env => "env",
            PluginRole::Reward => "reward",
        })
    }
}

/// One locked plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPlugin {
    /// `env` or `reward`.
    pub role: PluginRole,
    /// The reference as resolved (a built-in name, a path, a URL, an `oci://` reference).
    pub reference: String,
    /// sha256 of the component: the plugin's identity.
    pub digest: Digest,
    /// For an OCI reference, the manifest digest the tag pointed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_manifest: Option<Digest>,
    /// The plugin manifest's id (`namespace/Name-vN`).
    pub id: String,
    /// The plugin's version.
    pub version: String,
    /// The `ragen:gym` interface version it was built against.
    pub interface_version: String,
}

/// A lock file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Format version (1).
    pub version: u32,
    /// The plugins, in the order the run loaded them.
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<LockedPlugin>,
}

impl Default for LockFile {
    fn default() -> Self {
        Self {
            version: LOCK_FORMAT_VERSION,
            plugins: Vec::new(),
        }
    }
}

const HEADER: &str = "# ragen-gym.lock: the plugins this run used, written by `ragen-gym train` and `eval`.\n\
# `--locked ragen-gym.lock` refuses any plugin whose digest differs from the one below.\n\n";

impl LockFile {
    /// Read and validate `path`.
    ///
    /// # Errors
    /// [`LockError::Io`] or [`LockError::Parse`] (naming the field).
    pub fn read(path: &Path) -> Result<Self, LockError> {
        let text = std::fs::read_to_string(path).map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let lock: Self = toml::from_str(&text).map_err(|e| LockError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if lock.version != LOCK_FORMAT_VERSION {
            return Err(LockError::Parse {
                path: path.to_path_buf(),
                reason: format!(
                    "format version {} is not the supported {LOCK_FORMAT_VERSION}",
                    lock.version
                ),
            });
        }
        Ok(lock)
    }

    /// Write to `path` atomically (temp file, fsync, rename).
    ///
    /// # Errors
    /// [`LockError::Io`].
    pub fn write(&self, path: &Path) -> Result<(), LockError> {
        let body = toml::to_string(self).map_err(|e| LockError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        write_atomic(path, format!("{HEADER}{body}").as_bytes()).map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The entry for `reference` used as `role`.
    pub fn find(&self, role: PluginRole, reference: &str) -> Option<&LockedPlugin> {
        self.plugins
            .iter()
            .find(|p| p.role == role && p.reference == reference)
    }

    /// The entry for `reference` used as `role`, or [`LockError::NotLocked`] naming the lock
    /// file at `path`.
    ///
    /// # Errors
    /// [`LockError::NotLocked`].
    pub fn require(
        &self,
        role: PluginRole,
        reference: &str,
        path: &Path,
    ) -> Result<&LockedPlugin, LockError> {
        self.find(role, reference)
            .ok_or_else(|| LockError::NotLocked {
                role: role.to_string(),
                reference: reference.to_string(),
                path: path.to_path_buf(),
            })
    }

    /// Add or replace the entry for (`entry.role`, `entry.reference`).
    pub fn upsert(&mut self, entry: LockedPlugin) {
        match self
            .plugins
            .iter_mut()
            .find(|p| p.role == entry.role && p.reference == entry.reference)
        {
            Some(p) => *p = entry,
            None => self.plugins.push(entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(reference: &str, bytes: &[u8]) -> LockedPlugin {
        LockedPlugin {
            role: PluginRole::Env,
            reference: reference.into(),
            digest: Digest::of(bytes),
            oci_manifest: Some(Digest::of(b"manifest")),
            id: "ragen/Sokoban-v0".into(),
            version: "0.1.0".into(),
            interface_version: "0.1.0".into(),
        }
    }

    #[test]
    fn a_lock_round_trips_and_finds_by_role_and_reference() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(LOCK_FILE_NAME);
        let mut lock = LockFile::default();
        lock.upsert(entry("oci://127.0.0.1:5000/ragen/sokoban:0.1.0", b"a"));
        lock.upsert(entry("oci://127.0.0.1:5000/ragen/sokoban:0.1.0", b"b"));
        assert_eq!(lock.plugins.len(), 1, "upsert replaces");
        lock.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# ragen-gym.lock"), "{text}");
        assert!(
            text.contains(&format!("digest = \"{}\"", Digest::of(b"b"))),
            "{text}"
        );
        let back = LockFile::read(&path).unwrap();
        assert_eq!(back, lock);
        assert!(
            back.find(
                PluginRole::Reward,
                "oci://127.0.0.1:5000/ragen/sokoban:0.1.0"
            )
            .is_none()
        );
        let e = back.require(PluginRole::Env, "sokoban", &path).unwrap_err();
        assert!(
            e.to_string()
                .contains("env plugin sokoban is not in lock file"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_lock_file_names_the_field() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("bad.lock");
        std::fs::write(&path, "version = 1\n[[plugin]]\nrole = \"env\"\nreference = \"x\"\ndigest = \"sha256:00\"\nid = \"a\"\nversion = \"1\"\ninterface_version = \"0.1.0\"\n").unwrap();
        let e = LockFile::read(&path).unwrap_err().to_string();
        assert!(e.contains("bad.lock") && e.contains("64 hex"), "{e}");
        std::fs::write(&path, "version = 2\n").unwrap();
        let e = LockFile::read(&path).unwrap_err().to_string();
        assert!(e.contains("format version 2"), "{e}");
    }
}
