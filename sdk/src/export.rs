//! The [`export_env!`](crate::export_env) and [`export_reward!`](crate::export_reward) macros.
//!
//! Usage, in a plugin crate with `crate-type = ["cdylib", "rlib"]`:
//!
//! ```ignore
//! ragen_gym_sdk::export_env!(MyEnv);        // MyEnv: Environment
//! ragen_gym_sdk::export_reward!(MyReward);  // MyReward: RewardFunction
//! ```
//!
//! On every target the macro records the crate's Cargo `version` and `description`
//! ([`Package`](crate::Package)) and checks the trait's `ID` at compile time. On `wasm32` it
//! also embeds the derived manifest ([`ManifestParts`](crate::manifest::ManifestParts)) in the
//! [`MANIFEST_SECTION`](crate::MANIFEST_SECTION) custom section and generates the component
//! exports; natively nothing else is generated, so the same crate is unit-tested and linked into
//! the host (`ragen_gym_core::NativeEnv`).

/// Export an [`Environment`](crate::Environment) implementation as the plugin's component (see
/// the module docs of `export`).
#[macro_export]
macro_rules! export_env {
    ($env:ty $(,)?) => {
        impl $crate::Package for $env {
            const VERSION: &'static str = env!("CARGO_PKG_VERSION");
            const DESCRIPTION: &'static str = env!("CARGO_PKG_DESCRIPTION");
        }
        const _: usize = $crate::manifest::ManifestParts::env::<$env>().json_len();
        $crate::__export_env_component!($env);
    };
}

/// Export a [`RewardFunction`](crate::RewardFunction) implementation as the plugin's component
/// (see the module docs of `export`).
#[macro_export]
macro_rules! export_reward {
    ($reward:ty $(,)?) => {
        impl $crate::Package for $reward {
            const VERSION: &'static str = env!("CARGO_PKG_VERSION");
            const DESCRIPTION: &'static str = env!("CARGO_PKG_DESCRIPTION");
        }
        const _: usize = $crate::manifest::ManifestParts::reward::<$reward>().json_len();
        $crate::__export_reward_component!($reward);
    };
}

#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_env_component {
    ($env:ty) => {};
}

#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_reward_component {
    ($reward:ty) => {};
}

/// The derived manifest as the `ragen:plugin` custom section (a `static` the linker keeps).
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __manifest_section {
    ($parts:expr) => {
        const _: () = {
            const PARTS: $crate::manifest::ManifestParts = $parts;
            const LEN: usize = PARTS.json_len();
            #[unsafe(link_section = "ragen:plugin")]
            #[used]
            static __RAGEN_GYM_MANIFEST: [u8; LEN] = PARTS.json_bytes::<LEN>();
        };
    };
}

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_env_component {
    ($env:ty) => {
        $crate::__manifest_section!($crate::manifest::ManifestParts::env::<$env>());
        #[doc(hidden)]
        type __RagenGymEnvShim = $crate::bindings::EnvShim<$env>;
        $crate::bindings::env_world::export!(__RagenGymEnvShim with_types_in $crate::bindings::env_world);
    };
}

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_reward_component {
    ($reward:ty) => {
        $crate::__manifest_section!($crate::manifest::ManifestParts::reward::<$reward>());
        #[doc(hidden)]
        type __RagenGymRewardShim = $crate::bindings::RewardShim<$reward>;
        $crate::bindings::reward_world::export!(__RagenGymRewardShim with_types_in $crate::bindings::reward_world);
    };
}
