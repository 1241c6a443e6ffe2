//! The [`export_env!`](crate::export_env) macro.
//!
//! Usage (in a plugin crate with `crate-type = ["cdylib", "rlib"]`):
//!
//! ```ignore
//! ragen_gym_sdk::export_env!(MyEnv, r#"{"id":"me/MyEnv-v0","version":"0.1.0",
//!     "interface_version":"0.1.0","kind":"environment","description":"..."}"#);
//! ```
//!
//! On `wasm32` it generates the component exports for `MyEnv: Environment` and embeds the
//! manifest JSON in the [`MANIFEST_SECTION`](crate::MANIFEST_SECTION) custom section. On native
//! targets it expands to nothing, so the same crate can be tested and benchmarked natively.

/// Export an [`Environment`](crate::Environment) implementation as the plugin's component
/// (see the module docs of `export`). Expands to nothing off wasm.
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_env {
    ($env:ty, $manifest:expr $(,)?) => {};
}

/// Export an [`Environment`](crate::Environment) implementation as the plugin's component and
/// embed `$manifest` (a JSON string literal or `const &str`) in the
/// [`MANIFEST_SECTION`](crate::MANIFEST_SECTION) custom section.
#[cfg(target_arch = "wasm32")]
#[macro_export]
macro_rules! export_env {
    ($env:ty, $manifest:expr $(,)?) => {
        const _: () = {
            #[unsafe(link_section = "ragen:plugin")]
            #[used]
            static __RAGEN_GYM_MANIFEST: [u8; { $manifest.len() }] =
                $crate::manifest::str_to_array::<{ $manifest.len() }>($manifest);
        };
        #[doc(hidden)]
        type __RagenGymShim = $crate::bindings::Shim<$env>;
        $crate::bindings::export!(__RagenGymShim with_types_in $crate::bindings);
    };
}
