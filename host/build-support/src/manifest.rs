//! The manifest of a Python or JavaScript plugin: the JSON the host reads from the `ragen:plugin`
//! custom section (the same fields the Rust SDK's `export_env!` writes, `sdk/src/manifest.rs`),
//! and appending it to a component. A custom section is id 0, the LEB128 size of its contents,
//! then the LEB128 length of the name, the name and the payload (WebAssembly core spec §5.5.3);
//! custom sections may appear anywhere at the top level, so appending keeps the binary valid.

use crate::error::BuildError;
use crate::project::{PluginTable, Project};
use std::path::Path;

/// The custom section the host reads (`ragen_gym_sdk::MANIFEST_SECTION`).
pub const SECTION: &str = "ragen:plugin";

/// The `ragen:gym` version of the WIT in `wit_dir`: the `package ragen:gym@X.Y.Z;` line of its
/// `worlds.wit`.
///
/// # Errors
/// [`BuildError::Io`] or [`BuildError::Field`] when the file or the line is missing.
pub fn interface_version(wit_dir: &Path) -> Result<String, BuildError> {
    let path = wit_dir.join("worlds.wit");
    let text = std::fs::read_to_string(&path).map_err(BuildError::io(&path))?;
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("package ragen:gym@")?
                .strip_suffix(';')
        })
        .map(str::to_string)
        .ok_or_else(|| BuildError::field(&path, "package", "no `package ragen:gym@X.Y.Z;` line"))
}

/// The manifest JSON of a Python or JavaScript project.
pub fn manifest_json(project: &Project, plugin: &PluginTable, interface: &str) -> String {
    let mut limits = serde_json::Map::new();
    if let Some(fuel) = plugin.limits.fuel_per_call {
        limits.insert("fuel_per_call".into(), fuel.into());
    }
    if let Some(bytes) = plugin.limits.memory_bytes {
        limits.insert("memory_bytes".into(), bytes.into());
    }
    serde_json::json!({
        "id": plugin.id,
        "version": project.version,
        "interface_version": interface,
        "kind": plugin.kind.as_str(),
        "description": project.description,
        "capabilities": {
            "http": plugin.capabilities.http,
            "clock": plugin.capabilities.clock,
            "random": plugin.capabilities.random,
        },
        "limits": limits,
    })
    .to_string()
}

fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `wasm` with a custom section `name` holding `payload` appended.
pub fn append_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    let mut contents = Vec::with_capacity(name.len() + payload.len() + 10);
    leb128(name.len(), &mut contents);
    contents.extend_from_slice(name.as_bytes());
    contents.extend_from_slice(payload);
    let mut out = Vec::with_capacity(wasm.len() + contents.len() + 6);
    out.extend_from_slice(wasm);
    out.push(0);
    leb128(contents.len(), &mut out);
    out.extend_from_slice(&contents);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_and_the_section_layout_match_the_spec() {
        let mut v = Vec::new();
        leb128(624_485, &mut v);
        // The LEB128 example of the DWARF spec (and Wikipedia): 624485 = e5 8e 26.
        assert_eq!(v, [0xe5, 0x8e, 0x26]);
        let out = append_custom_section(b"\0asm", "ab", b"xyz");
        assert_eq!(out, b"\0asm\x00\x06\x02abxyz");
        let big = append_custom_section(&[], SECTION, &[b'x'; 200]);
        // contents = 1 + 12 + 200 = 213 bytes: LEB128 d5 01.
        assert_eq!(&big[..4], &[0x00, 0xd5, 0x01, 12]);
    }

    #[test]
    fn the_interface_version_comes_from_worlds_wit() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        let v = interface_version(&wit).unwrap();
        assert_eq!(v.split('.').count(), 3, "{v}");
        let e = interface_version(Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("worlds.wit"), "{e}");
    }
}
