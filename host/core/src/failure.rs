//! [`PluginFailure`]: a call into a plugin failed in a way the plugin did not report itself (a
//! trap or a broken sandbox rule). Engine-free, so the trainer can count failures by
//! [`PluginFailureKind`] without depending on wasmtime.

/// The class of a plugin failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginFailureKind {
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
    /// The identity the plugin reports at run time (`spec()` id and version) is not the one
    /// its manifest declares (`docs/architecture.md` §5).
    IdentityMismatch,
}

impl PluginFailureKind {
    /// Every kind, in declaration order (for per-kind counters).
    pub const ALL: [Self; 9] = [
        Self::OutOfFuel,
        Self::Deadline,
        Self::OutOfMemory,
        Self::StackOverflow,
        Self::Panic,
        Self::Trap,
        Self::BadOutput,
        Self::Instantiate,
        Self::IdentityMismatch,
    ];

    /// A `snake_case` name for metric keys (`out_of_fuel`, `deadline`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OutOfFuel => "out_of_fuel",
            Self::Deadline => "deadline",
            Self::OutOfMemory => "out_of_memory",
            Self::StackOverflow => "stack_overflow",
            Self::Panic => "panic",
            Self::Trap => "trap",
            Self::BadOutput => "bad_output",
            Self::Instantiate => "instantiate",
            Self::IdentityMismatch => "identity_mismatch",
        }
    }
}

impl std::fmt::Display for PluginFailureKind {
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
            Self::IdentityMismatch => "reports another identity than its manifest",
        })
    }
}

/// A call into a plugin trapped or broke a sandbox rule. The instance it ran in has been
/// discarded; the next call runs on a fresh one (`docs/architecture.md`, "Sandbox rules").
/// Displayed with the plugin's identity, like Zed's extension host does:
/// `from plugin "ns/Name-v0" 0.1.0: out of fuel: ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("from plugin \"{plugin_id}\" {version}: {kind}: {message}")]
pub struct PluginFailure {
    /// The class of failure.
    pub kind: PluginFailureKind,
    /// Plugin id, `namespace/Name-vN`.
    pub plugin_id: String,
    /// Plugin version.
    pub version: String,
    /// Details (trap message, captured panic message, which field was bad).
    pub message: String,
}

/// What ended an episode early on the env's side, by class: the trainer's failure policy acts on
/// it, and counts it as `sandbox/timeouts` or `sandbox/traps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeFailure {
    /// A call's wall-clock deadline passed, or the trajectory's wall budget ran out.
    Timeout,
    /// Any other plugin failure (a trap, fuel, memory, a panic, bad output, instantiation) or an
    /// error the env returned.
    Trap,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_plugin_kind_and_message() {
        let f = PluginFailure {
            kind: PluginFailureKind::OutOfFuel,
            plugin_id: "t/T-v0".into(),
            version: "0.2.1".into(),
            message: "used its budget".into(),
        };
        assert_eq!(
            f.to_string(),
            "from plugin \"t/T-v0\" 0.2.1: out of fuel: used its budget"
        );
    }

    #[test]
    fn metric_names_are_distinct_snake_case() {
        let mut names: Vec<&str> = PluginFailureKind::ALL.iter().map(|k| k.as_str()).collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PluginFailureKind::ALL.len());
    }
}
