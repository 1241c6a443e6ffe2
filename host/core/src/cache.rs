//! Where ragen-gym keeps downloaded and derived files.

use std::path::PathBuf;

/// The ragen-gym cache: `$RAGEN_GYM_CACHE`, else `$HOME/.cache/ragen-gym` (`None` without
/// either). Models live in `models/`, compiled plugins in `compiled/`, downloaded plugins in
/// `plugins/`.
pub fn cache_root() -> Option<PathBuf> {
    match std::env::var_os("RAGEN_GYM_CACHE") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/ragen-gym")),
    }
}
