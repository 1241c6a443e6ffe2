//! Read and validate a plugin without running any of its code: parse the component with
//! `wasmparser`, find the `ragen:plugin` manifest section (at any nesting depth; rustc places it
//! in the nested core module), check the interface version (semver) and the component's imports
//! and exports against the manifest.

use crate::error::LoadError;
use ragen_gym_core::{MANIFEST_SECTION, Manifest, PluginKind, check_interface_version};
use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmparser::{Encoding, Parser, Payload};

/// Everything known about a plugin before running it.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    /// The embedded manifest.
    pub manifest: Manifest,
    /// sha256 of the component bytes, lowercase hex: the plugin's identity.
    pub sha256: String,
    /// Size of the component in bytes.
    pub size_bytes: usize,
    /// The initial size of every linear memory the component defines, bytes: the least memory
    /// any instance of it takes. A plugin whose memory cap is below this cannot be loaded.
    pub min_memory_bytes: u64,
    /// Top-level component imports (interface names with versions).
    pub imports: Vec<String>,
    /// Top-level component exports.
    pub exports: Vec<String>,
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Parse `bytes` (named `name` in errors), read the manifest and check it, its interface version
/// and the imports/exports. Runs no plugin code.
///
/// # Errors
/// [`LoadError::Malformed`], [`LoadError::NotAComponent`], [`LoadError::MissingManifest`],
/// [`LoadError::InvalidManifest`], [`LoadError::IncompatibleInterface`],
/// [`LoadError::ForbiddenImport`], [`LoadError::MissingExport`].
pub fn inspect_bytes(name: &str, bytes: &[u8]) -> Result<PluginInfo, LoadError> {
    let scan = Scan::of(name, bytes)?;
    let raw = scan.manifest.ok_or_else(|| LoadError::MissingManifest {
        name: name.to_string(),
    })?;
    let manifest: Manifest =
        serde_json::from_slice(raw).map_err(|e| LoadError::InvalidManifest {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
    validate_manifest(name, &manifest)?;
    check_interface_version(&manifest.interface_version).map_err(|e| {
        LoadError::IncompatibleInterface {
            name: name.to_string(),
            id: manifest.id.clone(),
            version: manifest.version.clone(),
            mismatch: e,
        }
    })?;
    check_imports(name, &manifest, &scan.imports)?;
    check_exports(name, &manifest, &scan.exports)?;
    Ok(PluginInfo {
        manifest,
        sha256: sha256_hex(bytes),
        size_bytes: bytes.len(),
        min_memory_bytes: scan.min_memory_bytes,
        imports: scan.imports,
        exports: scan.exports,
    })
}

/// What one pass over a component's sections finds, before anything is checked.
struct Scan<'a> {
    /// The `ragen:plugin` custom section's bytes.
    manifest: Option<&'a [u8]>,
    /// The component's own (top-level) import names.
    imports: Vec<String>,
    /// The component's own (top-level) export names.
    exports: Vec<String>,
    /// The sum of every memory's initial size, in bytes.
    min_memory_bytes: u64,
}

impl<'a> Scan<'a> {
    /// Parse `bytes` (named `name` in errors) with wasmparser, collecting the scan's fields.
    fn of(name: &str, bytes: &'a [u8]) -> Result<Self, LoadError> {
        let malformed = |e: &dyn std::fmt::Display| LoadError::Malformed {
            name: name.to_string(),
            reason: e.to_string(),
        };
        let mut scan = Scan {
            manifest: None,
            imports: Vec::new(),
            exports: Vec::new(),
            min_memory_bytes: 0,
        };
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(|e| malformed(&e))? {
                Payload::Version { encoding, .. } => {
                    if depth == 0 && encoding != Encoding::Component {
                        return Err(LoadError::NotAComponent {
                            name: name.to_string(),
                        });
                    }
                    depth += 1;
                }
                Payload::End(_) => depth = depth.saturating_sub(1),
                Payload::CustomSection(section) if section.name() == MANIFEST_SECTION => {
                    if scan.manifest.is_some() {
                        return Err(LoadError::InvalidManifest {
                            name: name.to_string(),
                            reason: "more than one `ragen:plugin` section".into(),
                        });
                    }
                    scan.manifest = Some(section.data());
                }
                Payload::MemorySection(reader) => {
                    for memory in reader {
                        let memory = memory.map_err(|e| malformed(&e))?;
                        let page = 1u64 << memory.page_size_log2.unwrap_or(16);
                        scan.min_memory_bytes = scan
                            .min_memory_bytes
                            .saturating_add(memory.initial.saturating_mul(page));
                    }
                }
                Payload::ComponentImportSection(reader) if depth == 1 => {
                    for import in reader {
                        let import = import.map_err(|e| malformed(&e))?;
                        scan.imports.push(import.name.name.to_string());
                    }
                }
                Payload::ComponentExportSection(reader) if depth == 1 => {
                    for export in reader {
                        let export = export.map_err(|e| malformed(&e))?;
                        scan.exports.push(export.name.name.to_string());
                    }
                }
                _ => {}
            }
        }
        if depth != 0 {
            return Err(malformed(&"unexpected end of file"));
        }
        Ok(scan)
    }
}

fn validate_manifest(name: &str, m: &Manifest) -> Result<(), LoadError> {
    let bad = |reason: String| {
        Err(LoadError::InvalidManifest {
            name: name.to_string(),
            reason,
        })
    };
    if let Err(why) = ragen_gym_core::check_id(&m.id) {
        return bad(format!("field `id`: {why}"));
    }
    if semver::Version::parse(&m.version).is_err() {
        return bad(format!("field `version` is not semver: {:?}", m.version));
    }
    if m.limits.fuel_per_call == Some(0) {
        return bad("field `limits.fuel_per_call` is 0, a budget no call can run in".into());
    }
    if m.limits.memory_bytes == Some(0) {
        return bad("field `limits.memory_bytes` is 0".into());
    }
    for target in &m.capabilities.http {
        if let Err(e) = crate::http::HostPort::parse(target) {
            return bad(format!("field `capabilities.http`: {e}"));
        }
    }
    Ok(())
}

fn check_imports(name: &str, m: &Manifest, imports: &[String]) -> Result<(), LoadError> {
    for import in imports {
        let forbid = |reason: &str| LoadError::ForbiddenImport {
            name: name.to_string(),
            id: m.id.clone(),
            import: import.clone(),
            reason: reason.to_string(),
        };
        let base = import.split('@').next().unwrap_or(import);
        match base {
            // WASI is linked but grants nothing: no preopens, env vars, args or sockets.
            b if b.starts_with("wasi:") => {}
            "ragen:gym/log" | "ragen:gym/types" => {}
            "ragen:gym/http" => {
                if m.kind != PluginKind::Environment {
                    return Err(forbid("http is only available to environment plugins"));
                }
                if m.capabilities.http.is_empty() {
                    return Err(forbid(
                        "the manifest declares no http capability (`capabilities.http`)",
                    ));
                }
            }
            _ => return Err(forbid("the host does not provide this interface")),
        }
    }
    Ok(())
}

fn check_exports(name: &str, m: &Manifest, exports: &[String]) -> Result<(), LoadError> {
    let expected = m.kind.export();
    if exports
        .iter()
        .any(|e| e.split('@').next() == Some(expected))
    {
        Ok(())
    } else {
        Err(LoadError::MissingExport {
            name: name.to_string(),
            id: m.id.clone(),
            expected: expected.to_string(),
            found: exports.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_core::{Capabilities, INTERFACE_VERSION, ManifestLimits};

    fn manifest(interface: &str) -> Manifest {
        Manifest {
            id: "t/T-v0".into(),
            version: "0.1.0".into(),
            interface_version: interface.into(),
            kind: PluginKind::Environment,
            description: String::new(),
            capabilities: Capabilities::default(),
            limits: ManifestLimits::default(),
        }
    }

    #[test]
    fn http_import_needs_declaration() {
        let imports = vec![
            format!("ragen:gym/http@{INTERFACE_VERSION}"),
            "wasi:filesystem/types@0.2.6".to_string(),
        ];
        assert!(matches!(
            check_imports("t.wasm", &manifest(INTERFACE_VERSION), &imports),
            Err(LoadError::ForbiddenImport { .. })
        ));
        let mut m = manifest(INTERFACE_VERSION);
        m.capabilities.http = vec!["127.0.0.1:3000".into()];
        assert!(check_imports("t.wasm", &m, &imports).is_ok());
        assert!(check_imports("t.wasm", &m, &["evil:x/y".to_string()]).is_err());
        // The reward-plugin world has no http import, declared or not.
        m.kind = PluginKind::RewardFunction;
        match check_imports("t.wasm", &m, &imports) {
            Err(e @ LoadError::ForbiddenImport { .. }) => {
                assert!(
                    e.to_string().contains("only available to environment"),
                    "{e}"
                );
            }
            other => panic!("expected ForbiddenImport, got {other:?}"),
        }
    }

    #[test]
    fn garbage_and_truncated_bytes_are_malformed() {
        assert!(matches!(
            inspect_bytes("g", b"not wasm at all"),
            Err(LoadError::Malformed { .. })
        ));
        let header = b"\0asm\x0d\0\x01\0\x01\x05";
        assert!(matches!(
            inspect_bytes("t", header),
            Err(LoadError::Malformed { .. })
        ));
        assert!(matches!(
            inspect_bytes("m", b"\0asm\x01\0\0\0"),
            Err(LoadError::NotAComponent { .. })
        ));
    }
}
