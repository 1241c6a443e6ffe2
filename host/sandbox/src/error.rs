//! [`LoadError`]: why a plugin file cannot be used. (A call into a running plugin that traps or
//! breaks a sandbox rule is a `ragen_gym_core::PluginFailure`.)

use ragen_gym_core::{InterfaceMismatch, PluginFailure, PluginFileError};

/// Why a plugin could not be loaded. No plugin code has run when one of these is returned,
/// except for [`LoadError::Instantiate`].
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read, is not a regular file, or is over the plugin size cap.
    #[error(transparent)]
    File(#[from] PluginFileError),
    /// Not a WebAssembly binary, or cut short.
    #[error("plugin {name} is not a valid WebAssembly binary: {reason}")]
    Malformed {
        /// File name or built-in name.
        name: String,
        /// What the parser said.
        reason: String,
    },
    /// A core module instead of a component.
    #[error(
        "plugin {name} is a core WebAssembly module, not a component (build for wasm32-wasip2)"
    )]
    NotAComponent {
        /// File name or built-in name.
        name: String,
    },
    /// No `ragen:plugin` custom section.
    #[error(
        "plugin {name} has no `ragen:plugin` manifest section (was it built with ragen-gym-sdk's export_env!?)"
    )]
    MissingManifest {
        /// File name or built-in name.
        name: String,
    },
    /// The manifest is not valid JSON of the expected shape, or a field is invalid.
    #[error("plugin {name} has an invalid manifest: {reason}")]
    InvalidManifest {
        /// File name or built-in name.
        name: String,
        /// Which field and why.
        reason: String,
    },
    /// The plugin was built against an interface version this host does not support.
    #[error("plugin {id} {version} ({name}) {mismatch}")]
    IncompatibleInterface {
        /// File name or built-in name.
        name: String,
        /// Plugin id.
        id: String,
        /// Plugin version.
        version: String,
        /// The plugin's and the host's interface versions.
        mismatch: InterfaceMismatch,
    },
    /// The component imports something the host does not provide or the manifest did not declare.
    #[error("plugin {id} ({name}) imports `{import}`: {reason}")]
    ForbiddenImport {
        /// File name or built-in name.
        name: String,
        /// Plugin id.
        id: String,
        /// The import name.
        import: String,
        /// Why it is refused.
        reason: String,
    },
    /// The component does not export the interface its kind requires.
    #[error("plugin {id} ({name}) does not export `{expected}` (exports: {found})")]
    MissingExport {
        /// File name or built-in name.
        name: String,
        /// Plugin id.
        id: String,
        /// The required export.
        expected: String,
        /// What it exports instead.
        found: String,
    },
    /// Wasmtime could not compile or link the component.
    #[error("failed to compile plugin {id} {version}: {reason}")]
    Compile {
        /// Plugin id.
        id: String,
        /// Plugin version.
        version: String,
        /// Wasmtime's message.
        reason: String,
    },
    /// A sandbox setting is unusable (`SandboxConfig::validate`).
    #[error("invalid sandbox setting `{field}`: {reason}")]
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The plugin's linear memories start larger than the memory cap it would run under, so
    /// no instance of it could ever be made.
    #[error(
        "plugin {id} {version} needs at least {min_bytes} bytes of linear memory, over its memory cap of {cap_bytes} bytes"
    )]
    MemoryOverCap {
        /// Plugin id.
        id: String,
        /// Plugin version.
        version: String,
        /// The initial size of its memories, bytes (`PluginInfo::min_memory_bytes`).
        min_bytes: u64,
        /// The cap (the host's, lowered by the manifest), bytes.
        cap_bytes: u64,
    },
    /// The sandbox itself could not be set up (engine, cache directory).
    #[error("failed to set up the sandbox: {reason}")]
    Engine {
        /// What went wrong.
        reason: String,
    },
    /// Instantiating the plugin failed (including a trap in its start code).
    #[error(transparent)]
    Instantiate(#[from] PluginFailure),
}
