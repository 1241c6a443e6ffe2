//! The plugin manifest embedded in the component (custom section [`MANIFEST_SECTION`]).
//!
//! The host reads it with `wasmparser` without running plugin code. It is JSON:
//!
//! ```json
//! { "id": "ragen/Sokoban-v0", "version": "0.1.0", "interface_version": "0.1.0",
//!   "kind": "environment", "description": "...",
//!   "capabilities": { "http": ["127.0.0.1:3000"], "clock": false, "random": false },
//!   "limits": { "fuel_per_call": 1000000000, "memory_bytes": 67108864 } }
//! ```

/// Name of the custom section holding the manifest JSON. (`#[link_section]` takes only a literal,
/// so [`crate::export_env!`] spells it out; a test below keeps the two equal.)
pub const MANIFEST_SECTION: &str = "ragen:plugin";

include!(concat!(env!("OUT_DIR"), "/interface_version.rs"));

/// Copy a `&str` into a fixed-size byte array in a `const` context (used by [`crate::export_env!`]
/// to place the manifest in a `#[link_section]` static).
#[doc(hidden)]
pub const fn str_to_array<const N: usize>(s: &str) -> [u8; N] {
    let bytes = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_macro_uses_the_manifest_section_name() {
        let export = include_str!("export.rs");
        let attr = format!("#[unsafe(link_section = \"{MANIFEST_SECTION}\")]");
        assert!(export.contains(&attr), "export.rs lacks {attr}");
    }
}
