//! The string-level contract over the typed traits: what the component shim and the host's
//! native envs (`ragen_gym_core::NativeEnv`) call. Plugin authors do not need it.

use crate::config::parse_config;
use crate::env::Environment;
use crate::manifest::Package;
use crate::types::{EnvError, EnvSpec, ExpertInfo};

/// Parse and check a config string for `T`.
///
/// # Errors
/// [`EnvError::InvalidConfig`] naming the field.
pub fn config<T: Environment>(config: &str) -> Result<T::Config, EnvError> {
    let config: T::Config = parse_config(config)?;
    T::check_config(&config)?;
    Ok(config)
}

/// `T`'s spec for a config string, with `id`, `version`, `description` and `default_config`
/// filled from the manifest's sources (`T::ID`, Cargo metadata, `T::Config::default()`).
///
/// # Errors
/// [`EnvError::InvalidConfig`] for a bad config; [`EnvError::Other`] when the env's spec names
/// another id or version than its manifest.
pub fn spec<T: Environment + Package>(config_json: &str) -> Result<EnvSpec, EnvError> {
    let mut spec = T::spec(&config::<T>(config_json)?);
    fill(&mut spec.id, T::ID, "id")?;
    fill(&mut spec.version, T::VERSION, "version")?;
    if spec.description.is_empty() {
        spec.description = T::DESCRIPTION.to_string();
    }
    if spec.default_config.is_empty() {
        let default = serde_json::to_value(T::Config::default())
            .map_err(|e| EnvError::Other(format!("failed to serialise the default config: {e}")))?;
        // The contract says object; a config that is not one (`()`, a plain-text mode) has `{}`,
        // which also means the defaults.
        spec.default_config = if default.is_object() {
            default.to_string()
        } else {
            "{}".to_string()
        };
    }
    Ok(spec)
}

/// Build `T` from a config string.
///
/// # Errors
/// [`EnvError::InvalidConfig`] for a bad config, or what `T::new` returns.
pub fn create<T: Environment>(config_json: &str) -> Result<T, EnvError> {
    T::new(config::<T>(config_json)?)
}

/// `T`'s expert for a config string (`None`: it has none for that config).
///
/// # Errors
/// [`EnvError::InvalidConfig`] for a bad config.
pub fn expert_info<T: Environment>(config_json: &str) -> Result<Option<ExpertInfo>, EnvError> {
    Ok(T::expert_info(&config::<T>(config_json)?))
}

fn fill(field: &mut String, manifest: &str, name: &str) -> Result<(), EnvError> {
    if field.is_empty() {
        *field = manifest.to_string();
        Ok(())
    } else if field == manifest {
        Ok(())
    } else {
        Err(EnvError::Other(format!(
            "the spec's {name} `{field}` differs from the manifest's `{manifest}`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ResetResult, StepResult};
    use serde::{Deserialize, Serialize};

    #[derive(Default, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        size: u32,
    }

    struct Sized3;

    impl Environment for Sized3 {
        const ID: &'static str = "t/Sized-v0";
        type Config = Cfg;
        fn check_config(c: &Cfg) -> Result<(), EnvError> {
            if c.size > 3 {
                return Err(EnvError::InvalidConfig("field `size`: at most 3".into()));
            }
            Ok(())
        }
        fn spec(c: &Cfg) -> EnvSpec {
            let spec = EnvSpec::new("Go.").max_steps(c.size);
            if c.size == 2 {
                EnvSpec {
                    id: "t/Other-v0".into(),
                    ..spec
                }
            } else {
                spec
            }
        }
        fn new(_: Cfg) -> Result<Self, EnvError> {
            Ok(Self)
        }
        fn reset(&mut self, _: u64) -> Result<ResetResult, EnvError> {
            Ok("start".into())
        }
        fn step(&mut self, _: &str) -> Result<StepResult, EnvError> {
            Ok(StepResult::new("x"))
        }
    }

    crate::export_env!(Sized3);

    #[test]
    fn the_spec_is_filled_from_the_manifest_sources() {
        let spec = spec::<Sized3>(r#"{"size": 1}"#).unwrap();
        assert_eq!(spec.id, "t/Sized-v0");
        assert_eq!(spec.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(spec.max_episode_steps, 1);
        assert_eq!(spec.default_config, r#"{"size":0}"#);
        let manifest = crate::manifest::ManifestParts::env::<Sized3>();
        let m: serde_json::Value = serde_json::from_str(&manifest.json()).unwrap();
        assert_eq!(
            (m["id"].as_str(), m["version"].as_str()),
            (Some("t/Sized-v0"), Some(spec.version.as_str()))
        );
    }

    #[test]
    fn a_disagreeing_spec_and_a_bad_config_are_errors() {
        let e = spec::<Sized3>(r#"{"size": 2}"#).unwrap_err();
        assert!(
            e.to_string().contains("t/Other-v0") && e.to_string().contains("t/Sized-v0"),
            "{e}"
        );
        let e = spec::<Sized3>(r#"{"size": 9}"#).unwrap_err();
        assert_eq!(e, EnvError::InvalidConfig("field `size`: at most 3".into()));
        assert!(
            matches!(create::<Sized3>(r#"{"colour": 1}"#), Err(EnvError::InvalidConfig(m)) if m.contains("colour"))
        );
        assert!(create::<Sized3>("{}").is_ok() && create::<Sized3>("").is_ok());
    }
}
