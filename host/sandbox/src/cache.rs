//! Compiled-code cache: in memory by sha256, and on disk as `.cwasm` files keyed by sha256 and
//! the engine's `precompile_compatibility_hash` (a `.cwasm` from another engine configuration,
//! e.g. without fuel, cannot be loaded: wasmtime `Engine::precompile_compatibility_hash`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

/// `$RAGEN_GYM_CACHE/compiled`, else `~/.cache/ragen-gym/compiled`: the default
/// [`crate::SandboxConfig::cache_dir`].
pub fn default_cache_dir() -> Option<PathBuf> {
    Some(ragen_gym_core::cache_root()?.join("compiled"))
}

pub(crate) struct CompileCache {
    dir: Option<PathBuf>,
    engine_key: String,
    memory: Mutex<HashMap<String, Component>>,
}

impl CompileCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Self {
            dir,
            engine_key: format!("{:016x}", h.finish()),
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, sha256: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{sha256}-{}.cwasm", self.engine_key)))
    }

    /// The compiled component for `bytes` (identified by `sha256`), compiling at most once.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        if let Some(c) = self
            .memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sha256)
        {
            return Ok(c.clone());
        }
        let component = match self.path(sha256).filter(|p| p.is_file()) {
            // SAFETY: the file was written by `store` below from `Component::serialize` of this
            // same engine configuration (the name carries the sha256 of the source and the
            // engine's compatibility hash); the cache directory belongs to the host.
            Some(path) => match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(path = %path.display(), "ignoring unusable compiled cache entry: {e}");
                    self.compile_and_store(engine, sha256, bytes)?
                }
            },
            None => self.compile_and_store(engine, sha256, bytes)?,
        };
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sha256.to_string(), component.clone());
        Ok(component)
    }

    fn compile_and_store(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let component = Component::new(engine, bytes)?;
        if let Some(path) = self.path(sha256)
            && let Err(e) = store(&path, &component)
        {
            tracing::warn!(path = %path.display(), "could not write compiled cache entry: {e}");
        }
        Ok(component)
    }
}

/// Write atomically: temp file in the same directory, then rename.
fn store(path: &Path, component: &Component) -> anyhow_like::Result<()> {
    let dir = path.parent().ok_or("cache path has no parent")?;
    std::fs::create_dir_all(dir)?;
    let data = component.serialize().map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

mod anyhow_like {
    pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}
