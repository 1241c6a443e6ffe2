//! The `ragen:gym` interface version and the semver rule for plugins built against another one.
//!
//! [`INTERFACE_VERSION`] has one source: the WIT package line in `wit/worlds.wit`
//! (`package ragen:gym@X.Y.Z;`), read by `sdk/build.rs`. A plugin is accepted when its
//! `interface_version` is semver-compatible with the oldest release of the host's series
//! ([`OLDEST_COMPATIBLE_INTERFACE`], `^X.Y.Z`: before 1.0 a minor bump is breaking, so `^0.1.0` =
//! `>=0.1.0, <0.2.0`), which is also how wasmtime matches versioned imports and exports. Within
//! a series a release only adds (0.1.1 added the optional `expert` export), so a host of 0.1.1
//! runs a plugin built against 0.1.0 and a plugin of a later 0.1.x.

pub use ragen_gym_sdk::INTERFACE_VERSION;

/// The first release of the host's compatible series: the lowest interface version it loads.
/// Raised to the new version with every breaking bump (a minor bump before 1.0).
pub const OLDEST_COMPATIBLE_INTERFACE: &str = "0.1.0";

/// A plugin's `interface_version` is outside what this host accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "was built for ragen:gym interface {plugin}, but this host supports {supported} (host interface {INTERFACE_VERSION})"
)]
pub struct InterfaceMismatch {
    /// The version in the plugin's manifest.
    pub plugin: String,
    /// The semver range this host accepts ([`supported_interface`]).
    pub supported: String,
}

/// The semver range of interface versions this host accepts, e.g. `^0.1.0`.
pub fn supported_interface() -> String {
    format!("^{OLDEST_COMPATIBLE_INTERFACE}")
}

/// Check a plugin's `interface_version` against [`supported_interface`].
///
/// # Errors
/// [`InterfaceMismatch`] naming both versions when it is not semver or not compatible.
pub fn check_interface_version(plugin: &str) -> Result<(), InterfaceMismatch> {
    let supported = supported_interface();
    let compatible = semver::VersionReq::parse(&supported)
        .ok()
        .zip(semver::Version::parse(plugin).ok())
        .is_some_and(|(req, v)| req.matches(&v));
    if compatible {
        Ok(())
    } else {
        Err(InterfaceMismatch {
            plugin: plugin.to_string(),
            supported,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_version_is_the_wit_package_version() {
        let worlds = include_str!("../../../wit/worlds.wit");
        let line = format!("package ragen:gym@{INTERFACE_VERSION};");
        assert!(worlds.lines().any(|l| l.trim() == line), "{line}");
    }

    #[test]
    fn the_host_is_in_the_series_it_accepts() {
        assert_eq!(supported_interface(), "^0.1.0");
        assert!(check_interface_version(INTERFACE_VERSION).is_ok());
        // 0.1.0, before the optional expert, still loads.
        assert!(check_interface_version("0.1.0").is_ok());
    }

    #[test]
    fn compatible_versions_follow_semver_caret() {
        let v = semver::Version::parse(INTERFACE_VERSION).unwrap();
        let patch_up = format!("{}.{}.{}", v.major, v.minor, v.patch + 7);
        assert!(check_interface_version(INTERFACE_VERSION).is_ok());
        assert!(check_interface_version(&patch_up).is_ok());
        // The next breaking version: a minor bump before 1.0, a major bump after.
        let breaking = if v.major == 0 {
            format!("0.{}.0", v.minor + 1)
        } else {
            format!("{}.0.0", v.major + 1)
        };
        let older = format!("{}.{}.0-alpha", v.major, v.minor);
        for bad in [breaking.as_str(), older.as_str(), "x"] {
            let e = check_interface_version(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(INTERFACE_VERSION), "{e}");
        }
    }
}
