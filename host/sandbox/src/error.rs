//! Typed errors: [`LoadError`] (a plugin file cannot be used) and [`PluginError`] (a call into a
//! running plugin trapped or broke a sandbox rule).

use std::path::PathBuf;

/// Why a plugin could not be loaded. No plugin code has run when one of these is returned,
/// except for [`LoadError::Instantiate`].
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("failed to read plugin file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
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
    #[error(
        "plugin {id} {version} was built for ragen:gym interface {plugin_interface}, but this host supports {host_supported} (host interface {host_interface})"
    )]
    IncompatibleInterface {
        /// Plugin id.
        id: String,
        /// Plugin version.
        version: String,
        /// The version in the plugin's manifest.
        plugin_interface: String,
        /// The semver range this host accepts.
        host_supported: String,
        /// The host's own interface version.
        host_interface: String,
    },
    /// The component imports something the host does not provide or the manifest did not declare.
    #[error("plugin {id} imports `{import}`: {reason}")]
    ForbiddenImport {
        /// Plugin id.
        id: String,
        /// The import name.
        import: String,
        /// Why it is refused.
        reason: String,
    },
    /// The component does not export the interface its kind requires.
    #[error("plugin {id} does not export `{expected}` (exports: {found})")]
    MissingExport {
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
    /// The sandbox itself could not be set up (engine, cache directory).
    #[error("failed to set up the sandbox: {reason}")]
    Engine {
        /// What went wrong.
        reason: String,
    },
    /// Instantiating the plugin failed (including a trap in its start code).
    #[error(transparent)]
    Instantiate(#[from] PluginError),
}

/// What went wrong inside a plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginErrorKind {
    /// The per-call fuel budget ran out (deterministic).
    OutOfFuel,
    /// The per-call wall-clock deadline (epoch) passed.
    Deadline,
    /// A memory grow beyond the cap.
    OutOfMemory,
    /// Wasm stack exhausted (deep recursion).
    StackOverflow,
    /// The guest panicked or aborted (`unreachable`).
    Panic,
    /// Any other trap.
    Trap,
    /// The plugin returned something the host refuses (too long, non-finite number, ...).
    BadOutput,
    /// The plugin could not be instantiated.
    Instantiate,
}

impl std::fmt::Display for PluginErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::OutOfFuel => "out of fuel",
            Self::Deadline => "deadline exceeded",
            Self::OutOfMemory => "out of memory",
            Self::StackOverflow => "stack overflow",
            Self::Panic => "panicked",
            Self::Trap => "trapped",
            Self::BadOutput => "returned invalid output",
            Self::Instantiate => "failed to instantiate",
        })
    }
}

/// A call into a plugin failed in a way the plugin did not report itself (a trap or a broken
/// sandbox rule). The instance it ran in has been discarded (architecture note, "Sandbox rules";
/// style habit 4).
#[derive(Debug, Clone, thiserror::Error)]
#[error("from plugin \"{plugin_id}\" {plugin_version}: {kind}: {message}")]
pub struct PluginError {
    /// Plugin id, `namespace/Name-vN`.
    pub plugin_id: String,
    /// Plugin version.
    pub plugin_version: String,
    /// The class of failure.
    pub kind: PluginErrorKind,
    /// Details (trap message, captured panic message, which field was bad).
    pub message: String,
}
