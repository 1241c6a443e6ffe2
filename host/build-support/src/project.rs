//! A plugin project on disk, as `ragen-gym new` writes it and `ragen-gym build` reads it: a Rust
//! crate (`Cargo.toml`; the SDK derives the manifest), a Python project (`pyproject.toml` with a
//! `[tool.ragen-gym]` table) or a JavaScript package (`package.json` with a `"ragen-gym"` field).
//! The guide, `docs/plugins.md`, lists every field.

use crate::error::BuildError;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The language of a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A Rust crate built with cargo for wasm32-wasip2.
    Rust,
    /// Python built with componentize-py.
    Python,
    /// JavaScript built with componentize-js.
    JavaScript,
}

/// What a plugin exports (the manifest's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `ragen:gym/environment`.
    Environment,
    /// `ragen:gym/reward-function`.
    RewardFunction,
}

impl Kind {
    /// The manifest spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Environment => "environment",
            Self::RewardFunction => "reward-function",
        }
    }
}

/// Capabilities the plugin asks for (manifest `capabilities`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capabilities {
    /// `host:port` targets for `ragen:gym/http`.
    pub http: Vec<String>,
    /// The real clocks.
    pub clock: bool,
    /// Real randomness.
    pub random: bool,
}

/// Limits lower than the host's (manifest `limits`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Fuel units per call.
    pub fuel_per_call: Option<u64>,
    /// Linear-memory cap, bytes.
    pub memory_bytes: Option<u64>,
}

/// The plugin table of a Python or JavaScript project (`[tool.ragen-gym]`, `"ragen-gym"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PluginTable {
    /// `namespace/Name-vN`.
    pub id: String,
    /// Environment (the only kind the Python and JavaScript helpers export today).
    pub kind: Kind,
    /// Python: `module:Class`; JavaScript: the file whose default export is the env class.
    pub entry: String,
    /// Requested capabilities.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Requested limits.
    #[serde(default)]
    pub limits: Limits,
    /// The `ragen:gym` WIT directory, relative to the project (default `wit`, vendored by
    /// `ragen-gym new`).
    #[serde(default = "default_wit")]
    pub wit: PathBuf,
    /// Python: more directories on the module path (the project directory is always first).
    #[serde(default)]
    pub python_path: Vec<PathBuf>,
    /// JavaScript: the helper module `bindEnv` is imported from (default `ragen-gym.js`).
    #[serde(default = "default_helper")]
    pub helper: PathBuf,
}

fn default_wit() -> PathBuf {
    PathBuf::from("wit")
}

fn default_helper() -> PathBuf {
    PathBuf::from("ragen-gym.js")
}

/// A plugin project.
#[derive(Debug, Clone)]
pub struct Project {
    /// Its directory.
    pub dir: PathBuf,
    /// The project file (`Cargo.toml`, `pyproject.toml` or `package.json`).
    pub file: PathBuf,
    /// Its language.
    pub language: Language,
    /// Package name: the component is `build/<name>.wasm`.
    pub name: String,
    /// Package version (the manifest's `version`).
    pub version: String,
    /// Package description (the manifest's `description`).
    pub description: String,
    /// The plugin table (Python and JavaScript; a Rust crate's manifest comes from its code).
    pub plugin: Option<PluginTable>,
    /// The pinned version of the componentizer (Python: `requirements-build.txt`; JavaScript:
    /// `devDependencies`); empty for Rust.
    pub tool_version: String,
}

/// The npm package of the JavaScript componentizer.
pub const COMPONENTIZE_JS_PACKAGE: &str = "@bytecodealliance/componentize-js";

#[derive(Deserialize)]
struct PyProject {
    project: PyMeta,
    tool: Option<PyTool>,
}

#[derive(Deserialize)]
struct PyMeta {
    name: String,
    version: String,
    #[serde(default)]
    description: String,
}

#[derive(Deserialize)]
struct PyTool {
    #[serde(rename = "ragen-gym")]
    ragen_gym: Option<toml::Value>,
}

#[derive(Deserialize)]
struct PackageJson {
    name: String,
    version: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "ragen-gym")]
    ragen_gym: Option<serde_json::Value>,
    #[serde(default, rename = "devDependencies")]
    dev_dependencies: std::collections::BTreeMap<String, String>,
}

fn read(path: &Path) -> Result<String, BuildError> {
    std::fs::read_to_string(path).map_err(BuildError::io(path))
}

impl Project {
    /// Read the project in `dir`: `package.json` (with `"ragen-gym"`), then `pyproject.toml`
    /// (with `[tool.ragen-gym]`), then `Cargo.toml`.
    ///
    /// # Errors
    /// [`BuildError::NotAProject`] when none is there; [`BuildError::Field`] naming the file
    /// and field that is missing or malformed.
    pub fn load(dir: &Path) -> Result<Self, BuildError> {
        let dir = std::fs::canonicalize(dir).map_err(BuildError::io(dir))?;
        if let Some(p) = Self::load_js(&dir)? {
            return Ok(p);
        }
        if let Some(p) = Self::load_python(&dir)? {
            return Ok(p);
        }
        if let Some(p) = Self::load_rust(&dir)? {
            return Ok(p);
        }
        Err(BuildError::NotAProject { dir })
    }

    /// A JavaScript project: `package.json` with a `ragen-gym` table.
    fn load_js(dir: &Path) -> Result<Option<Self>, BuildError> {
        let js = dir.join("package.json");
        if !js.is_file() {
            return Ok(None);
        }
        let p: PackageJson = serde_json::from_str(&read(&js)?)
            .map_err(|e| BuildError::field(&js, "package.json", e.to_string()))?;
        let Some(table) = p.ragen_gym else {
            return Ok(None);
        };
        let plugin: PluginTable = serde_json::from_value(table)
            .map_err(|e| BuildError::field(&js, "ragen-gym", e.to_string()))?;
        let tool_version = p
            .dev_dependencies
            .get(COMPONENTIZE_JS_PACKAGE)
            .cloned()
            .filter(|v| exact_version(v))
            .ok_or_else(|| {
                BuildError::field(
                    &js,
                    &format!("devDependencies.{COMPONENTIZE_JS_PACKAGE}"),
                    "must pin an exact version, e.g. \"0.23.0\"",
                )
            })?;
        Self::scripted(
            dir.to_path_buf(),
            js,
            Language::JavaScript,
            p.name,
            p.version,
            p.description,
            plugin,
            tool_version,
        )
        .map(Some)
    }

    /// A Python project: `pyproject.toml` with a `[tool.ragen-gym]` table.
    fn load_python(dir: &Path) -> Result<Option<Self>, BuildError> {
        let py = dir.join("pyproject.toml");
        if !py.is_file() {
            return Ok(None);
        }
        let p: PyProject = toml::from_str(&read(&py)?)
            .map_err(|e| BuildError::field(&py, "pyproject.toml", e.to_string()))?;
        let Some(table) = p.tool.and_then(|t| t.ragen_gym) else {
            return Ok(None);
        };
        let plugin: PluginTable = table
            .try_into()
            .map_err(|e| BuildError::field(&py, "tool.ragen-gym", e.to_string()))?;
        let tool_version =
            pinned_requirement(&dir.join("requirements-build.txt"), "componentize-py")?;
        let m = p.project;
        Self::scripted(
            dir.to_path_buf(),
            py,
            Language::Python,
            m.name,
            m.version,
            m.description,
            plugin,
            tool_version,
        )
        .map(Some)
    }

    /// A Rust project: `Cargo.toml` with a package name.
    fn load_rust(dir: &Path) -> Result<Option<Self>, BuildError> {
        let rs = dir.join("Cargo.toml");
        if !rs.is_file() {
            return Ok(None);
        }
        let doc: toml::Table = toml::from_str(&read(&rs)?)
            .map_err(|e| BuildError::field(&rs, "Cargo.toml", e.to_string()))?;
        let package = doc.get("package").and_then(toml::Value::as_table);
        let text = |key: &str| {
            package
                .and_then(|p| p.get(key))
                .and_then(toml::Value::as_str)
                .map(str::to_string)
        };
        let name = text("name").ok_or_else(|| BuildError::field(&rs, "package.name", "missing"))?;
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            file: rs,
            language: Language::Rust,
            name,
            version: text("version").unwrap_or_default(),
            description: text("description").unwrap_or_default(),
            plugin: None,
            tool_version: String::new(),
        }))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one constructor for the two script languages"
    )]
    fn scripted(
        dir: PathBuf,
        file: PathBuf,
        language: Language,
        name: String,
        version: String,
        description: String,
        mut plugin: PluginTable,
        tool_version: String,
    ) -> Result<Self, BuildError> {
        check_id(&plugin.id).map_err(|reason| BuildError::field(&file, "ragen-gym.id", reason))?;
        if plugin.kind != Kind::Environment {
            return Err(BuildError::field(
                &file,
                "ragen-gym.kind",
                "the Python and JavaScript helpers export environments only; write reward functions in Rust (`ragen-gym new NAME --lang rust --kind reward`)",
            ));
        }
        plugin.wit = dir.join(&plugin.wit);
        plugin.helper = dir.join(&plugin.helper);
        plugin.python_path = plugin.python_path.iter().map(|p| dir.join(p)).collect();
        Ok(Self {
            dir,
            file,
            language,
            name,
            version,
            description,
            plugin: Some(plugin),
            tool_version,
        })
    }

    /// Where `ragen-gym build` writes the component: `<dir>/build/<name>.wasm`.
    pub fn default_output(&self) -> PathBuf {
        self.dir.join("build").join(format!("{}.wasm", self.name))
    }
}

/// `MAJOR.MINOR.PATCH` with digits only (what the pins must be).
fn exact_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The version pinned as `name==X.Y.Z` in a requirements file.
fn pinned_requirement(path: &Path, name: &str) -> Result<String, BuildError> {
    let text = read(path)?;
    text.lines()
        .filter_map(|l| {
            l.split('#')
                .next()?
                .trim()
                .strip_prefix(name)?
                .trim()
                .strip_prefix("==")
        })
        .map(|v| v.trim().to_string())
        .find(|v| exact_version(v))
        .ok_or_else(|| BuildError::field(path, name, format!("must be pinned as `{name}==X.Y.Z`")))
}

/// The host's id rule, as an error naming the id (`ragen_gym_core::check_id`: the code the
/// host runs at load and the SDK's export macros at compile time).
pub use ragen_gym_core::check_id;

/// The newest modification time of the files under `dirs` (recursively; `__pycache__`,
/// `node_modules`, `build` and `target` skipped): what a rebuild depends on.
pub fn newest_source(dirs: &[PathBuf]) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if matches!(
                name.to_str(),
                Some("__pycache__" | "node_modules" | "build" | "target")
            ) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(entry.path()),
                Ok(_) => {
                    if let Ok(m) = entry.metadata().and_then(|m| m.modified()) {
                        newest = newest.max(m);
                    }
                }
                Err(_) => {}
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_and_ids_are_checked() {
        assert!(exact_version("0.25.1") && !exact_version("^0.25.1") && !exact_version("0.25"));
        assert!(check_id("me/Guess-v0").is_ok());
        for bad in ["noslash", "/x", "x/", "a/b c"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_python_project_reads_its_table_and_names_bad_fields() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(
            dir.join("requirements-build.txt"),
            "# tools\ncomponentize-py==0.25.1\n",
        )
        .unwrap();
        let write = |table: &str| {
            std::fs::write(
                dir.join("pyproject.toml"),
                format!(
                    "[project]\nname = \"guess\"\nversion = \"0.2.0\"\n\n[tool.ragen-gym]\n{table}"
                ),
            )
            .unwrap();
        };
        write("id = \"me/Guess-v0\"\nkind = \"environment\"\nentry = \"app:Guess\"\n");
        let p = Project::load(dir).unwrap();
        assert_eq!(
            (p.language, p.name.as_str(), p.version.as_str()),
            (Language::Python, "guess", "0.2.0")
        );
        assert_eq!(p.tool_version, "0.25.1");
        let t = p.plugin.unwrap();
        assert_eq!(t.wit, p.dir.join("wit"));
        write("id = \"me/Guess-v0\"\nkind = \"environment\"\nentry = \"app:Guess\"\ncolour = 3\n");
        let e = Project::load(dir).unwrap_err().to_string();
        assert!(e.contains("pyproject.toml") && e.contains("colour"), "{e}");
        write("id = \"Guess\"\nkind = \"environment\"\nentry = \"app:Guess\"\n");
        let e = Project::load(dir).unwrap_err().to_string();
        assert!(e.contains("ragen-gym.id"), "{e}");
    }
}
