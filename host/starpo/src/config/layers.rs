//! Building a [`Config`] from its layers, lowest first: the embedded default, the CPU profile,
//! an env preset (with its `[cpu.*]` tables), an experiment file, `RAGEN_<SECTION>__<KEY>`
//! variables and `--set` overrides. Every layer is checked key by key against the default file
//! (`check_known`) and merged table by table (`merge`); [`ConfigBuilder::build`] then
//! deserialises the result and runs [`Config::validate`].

use super::{CPU_PROFILE_TOML, Config, ConfigError, DEFAULT_TOML};
use std::path::Path;

/// Builds a [`Config`] from layers, lowest first.
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    merged: toml::Table,
    known: toml::Table,
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// The hardware profile under the env preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `configs/cpu.toml`: RAGEN's shapes scaled down for a few CPU cores.
    Cpu,
    /// RAGEN's own sizes (meant for a GPU).
    Full,
}

/// The table of an env preset that holds the env's CPU-profile settings, e.g.
/// `[cpu.trainer] total_training_steps = 12` in `configs/bandit.toml`: the same sections as
/// any config, applied after the rest of the preset and only with [`Profile::Cpu`], so a GPU run
/// of the same env keeps RAGEN's sizes.
pub const PRESET_CPU_TABLE: &str = "cpu";

/// Parse a config layer's TOML text; `source_name` names it in errors.
fn parse_table(text: &str, source_name: &str) -> Result<toml::Table, ConfigError> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            source_name: source_name.into(),
            message: e.to_string(),
        })
}

/// A built-in env's config preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvPreset<'a> {
    /// The env's name, used in error messages (`the sokoban preset`).
    pub name: &'a str,
    /// The preset's TOML text.
    pub toml: &'a str,
}

impl ConfigBuilder {
    /// The base layers of a run, the same for `train` and `eval`: the embedded default, the CPU
    /// profile (with [`Profile::Cpu`]), then the env's preset when it has one. Add the user's
    /// layers with [`ConfigBuilder::user_layers`].
    pub fn for_env(preset: Option<EnvPreset<'_>>, profile: Profile) -> Result<Self, ConfigError> {
        let mut b = Self::new();
        if profile == Profile::Cpu {
            b = b.layer_str(CPU_PROFILE_TOML, "the CPU profile (configs/cpu.toml)")?;
        }
        match preset {
            Some(p) => b.layer_preset(p, profile),
            None => Ok(b),
        }
    }

    /// Merge an env preset for `profile`. Its `[cpu.<section>]` tables (see
    /// [`PRESET_CPU_TABLE`]) are the env's own CPU settings: they apply on top of the rest of
    /// the preset with [`Profile::Cpu`] only, and are checked for unknown keys either way.
    pub fn layer_preset(
        self,
        preset: EnvPreset<'_>,
        profile: Profile,
    ) -> Result<Self, ConfigError> {
        let source = format!("the {} preset", preset.name);
        let mut table = parse_table(preset.toml, &source)?;
        let cpu = table.remove(PRESET_CPU_TABLE);
        let b = self.layer_table(table, &source)?;
        match cpu {
            None => Ok(b),
            Some(toml::Value::Table(cpu)) => {
                let source = format!(
                    "the [{PRESET_CPU_TABLE}] tables of the {} preset",
                    preset.name
                );
                check_known(&cpu, &b.known, "", &source)?;
                if profile == Profile::Cpu {
                    b.layer_table(cpu, &source)
                } else {
                    Ok(b)
                }
            }
            Some(other) => Err(ConfigError::Parse {
                source_name: source,
                message: format!(
                    "`{PRESET_CPU_TABLE}` must be a table of config sections, not a {}",
                    other.type_str()
                ),
            }),
        }
    }

    /// The user's layers, in order: an experiment `file`, `RAGEN_<SECTION>__<KEY>` variables
    /// (`vars`, usually `std::env::vars()`), then `--set key=value` arguments.
    pub fn user_layers(
        self,
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
        overrides: &[String],
    ) -> Result<Self, ConfigError> {
        let mut b = match file {
            Some(f) => self.layer_file(f)?,
            None => self,
        };
        b = b.layer_env(vars)?;
        for o in overrides {
            b = b.layer_override(o)?;
        }
        Ok(b)
    }

    /// Set a string key to `value` verbatim (no TOML parsing, so quotes and backslashes in it
    /// are safe); `source_name` names the layer in errors.
    pub fn set_str(self, key: &str, value: &str, source_name: &str) -> Result<Self, ConfigError> {
        self.set_value(key, toml::Value::String(value.to_string()), source_name)
    }

    /// Start from the embedded default.
    pub fn new() -> Self {
        let table: toml::Table = DEFAULT_TOML.parse().expect("embedded default.toml parses");
        Self {
            merged: table.clone(),
            known: table,
        }
    }

    /// Merge a TOML text layer; `source_name` names it in errors.
    pub fn layer_str(self, text: &str, source_name: &str) -> Result<Self, ConfigError> {
        self.layer_table(parse_table(text, source_name)?, source_name)
    }

    /// Merge a parsed TOML table; `source_name` names it in errors.
    fn layer_table(mut self, table: toml::Table, source_name: &str) -> Result<Self, ConfigError> {
        check_known(&table, &self.known, "", source_name)?;
        merge(&mut self.merged, table);
        Ok(self)
    }

    /// Merge a TOML file.
    pub fn layer_file(self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.layer_str(&text, &path.display().to_string())
    }

    /// Merge `RAGEN_<SECTION>__<KEY>` variables (`__` separates path parts; names lowercased).
    /// Variables without `__` (such as `RAGEN_LOG`, `RAGEN_GYM_CACHE`) are not config keys.
    pub fn layer_env(
        self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut me = self;
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("RAGEN_") else {
                continue;
            };
            if !rest.contains("__") {
                continue;
            }
            let key = rest
                .split("__")
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(".");
            me = me.set(&key, &value, &format!("environment variable {name}"))?;
        }
        Ok(me)
    }

    /// Apply one `--set key=value` argument.
    pub fn layer_override(self, arg: &str) -> Result<Self, ConfigError> {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(ConfigError::BadOverride { arg: arg.into() });
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(ConfigError::BadOverride { arg: arg.into() });
        }
        self.set(key, value.trim(), &format!("--set {arg}"))
    }

    fn set(self, key: &str, raw: &str, source_name: &str) -> Result<Self, ConfigError> {
        // A value is parsed as TOML (numbers, booleans, quoted strings); anything else is a string.
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        self.set_value(key, value, source_name)
    }

    fn set_value(
        mut self,
        key: &str,
        value: toml::Value,
        source_name: &str,
    ) -> Result<Self, ConfigError> {
        let parts: Vec<&str> = key.split('.').collect();
        let mut known = &self.known;
        for (i, part) in parts.iter().enumerate() {
            match known.get(*part) {
                Some(toml::Value::Table(t)) if i + 1 < parts.len() => known = t,
                Some(v) if i + 1 == parts.len() && !v.is_table() => {}
                _ => {
                    return Err(ConfigError::UnknownKey {
                        key: key.into(),
                        source_name: source_name.into(),
                    });
                }
            }
        }
        let mut table = &mut self.merged;
        for part in &parts[..parts.len() - 1] {
            table = table
                .get_mut(*part)
                .and_then(toml::Value::as_table_mut)
                .expect("checked against the default");
        }
        table.insert(parts[parts.len() - 1].to_string(), value);
        Ok(self)
    }

    /// Deserialise the merged table and check cross-field rules.
    pub fn build(self) -> Result<Config, ConfigError> {
        let cfg: Config =
            self.merged
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    message: e.to_string(),
                })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

fn check_known(
    layer: &toml::Table,
    known: &toml::Table,
    prefix: &str,
    source_name: &str,
) -> Result<(), ConfigError> {
    for (k, v) in layer {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (known.get(k), v) {
            (Some(toml::Value::Table(kt)), toml::Value::Table(vt)) => {
                check_known(vt, kt, &path, source_name)?
            }
            (Some(kv), v) if !kv.is_table() && !v.is_table() => {}
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: path,
                    source_name: source_name.into(),
                });
            }
        }
    }
    Ok(())
}

fn merge(base: &mut toml::Table, layer: toml::Table) {
    for (k, v) in layer {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(bt)), toml::Value::Table(vt)) => merge(bt, vt),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl Config {
    /// The embedded default, unchanged.
    pub fn default_config() -> Self {
        ConfigBuilder::new()
            .build()
            .expect("embedded default.toml is valid")
    }

    /// Serialise back to TOML (the run directory's `config.toml`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }
}
