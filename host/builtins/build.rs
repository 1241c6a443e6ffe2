//! Build the built-in plugins listed in this crate's `Cargo.toml` (`[[package.metadata.builtin]]`)
//! to wasm32-wasip2 components, and generate the `BUILTINS` table (`$OUT_DIR/builtins.rs`) that
//! `src/lib.rs` includes: each entry's name, aliases, component bytes, preset text and native
//! constructor. Rust plugins are workspace crates (`package`); a Python or JavaScript plugin is
//! a project directory (`project`) built like `ragen-gym build` does, again only when one of its
//! sources is newer than the component.

use ragen_gym_build_support as wasm;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One `[[package.metadata.builtin]]` entry.
struct Entry {
    name: String,
    aliases: Vec<String>,
    /// The cargo package, or the project directory relative to the workspace root.
    source: Source,
    native: Option<String>,
    preset: Option<String>,
}

enum Source {
    Package(String),
    Project(String),
}

impl Entry {
    fn source_name(&self) -> &str {
        match &self.source {
            Source::Package(s) | Source::Project(s) => s,
        }
    }
}

/// Build a Python or JavaScript project `dir` (relative to `root`) into
/// `target/wasm-plugins/projects/<name>.wasm`, unless that is newer than every source.
fn build_project(root: &Path, name: &str, dir: &str) -> PathBuf {
    use wasm::{componentize, project, tools};
    let fail = |e: &dyn std::fmt::Display| -> ! {
        panic!("building the built-in `{name}` ({dir}) failed: {e}")
    };
    let p = wasm::Project::load(&root.join(dir)).unwrap_or_else(|e| fail(&e));
    let plugin = p
        .plugin
        .as_ref()
        .unwrap_or_else(|| fail(&"a Rust crate is a `package` entry"));
    let out_dir = wasm::target_dir(root).join("projects");
    let out = out_dir.join(format!("{name}.wasm"));
    let mut sources = vec![p.dir.clone(), plugin.wit.clone()];
    sources.extend(plugin.python_path.iter().cloned());
    let built = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
    if built.is_some_and(|b| b > project::newest_source(&sources)) {
        return out;
    }
    let tool = tools::find_or_install(&p, Some(root), false).unwrap_or_else(|e| fail(&e));
    componentize::build_scripted(&p, &tool, &out_dir.join(format!("{name}-gen")), &out)
        .unwrap_or_else(|e| fail(&e));
    out
}

fn main() {
    let root = wasm::workspace_root();
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("Cargo.toml");
    println!("cargo:rerun-if-changed={}", manifest.display());
    wasm::rerun_if_changed(&root, &["plugins", "sdk", "wit", "configs", "Cargo.toml"]);
    let entries = read_registry(&manifest);

    println!("cargo:rerun-if-env-changed=COMPONENTIZE_PY");
    println!("cargo:rerun-if-env-changed=COMPONENTIZE_JS");
    let packages: Vec<&str> = entries
        .iter()
        .filter_map(|e| match &e.source {
            Source::Package(p) => Some(p.as_str()),
            Source::Project(_) => None,
        })
        .collect();
    if let Err(e) = wasm::build(&root, &packages) {
        panic!("building the built-in plugins failed: {e}");
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut functions = String::new();
    let mut table = String::from(
        "/// The built-in plugins, in the order of `host/builtins/Cargo.toml`.\n\
         pub static BUILTINS: &[Builtin] = &[\n",
    );
    for e in &entries {
        let artifact = match &e.source {
            Source::Package(p) => wasm::artifact(&root, p),
            Source::Project(dir) => build_project(&root, &e.name, dir),
        };
        let dest = out_dir.join(format!("{}.wasm", e.name));
        std::fs::copy(&artifact, &dest)
            .unwrap_or_else(|err| panic!("copying {} failed: {err}", artifact.display()));
        let preset = match &e.preset {
            Some(file) => {
                let path = root.join("configs").join(file);
                assert!(
                    path.is_file(),
                    "built-in `{}`: preset {} does not exist",
                    e.name,
                    path.display()
                );
                format!("Some(include_str!({:?}))", path.display().to_string())
            }
            None => "None".into(),
        };
        let native = match &e.native {
            Some(ty) => {
                let f = format!("native_{}", e.name.replace('-', "_"));
                writeln!(
                    functions,
                    "fn {f}(config: &str) -> Result<Box<dyn Env>, EnvCallError> {{\n    \
                     Ok(Box::new(NativeEnv::<{ty}>::new(config)?))\n}}"
                )
                .expect("write to a String");
                format!("Some({f})")
            }
            None => "None".into(),
        };
        write!(
            table,
            "    Builtin {{\n        name: {:?},\n        aliases: &{:?},\n        package: {:?},\n        \
             wasm: include_bytes!({:?}),\n        preset: {preset},\n        native: {native},\n    }},\n",
            e.name,
            e.aliases,
            e.source_name(),
            dest.display().to_string(),
        )
        .expect("write to a String");
    }
    table.push_str("];\n");
    std::fs::write(out_dir.join("builtins.rs"), functions + "\n" + &table)
        .expect("write builtins.rs");
}

/// Read and check the registry: names and aliases unique, packages and types well-formed.
fn read_registry(manifest: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(manifest)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    let doc: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", manifest.display()));
    let list = doc
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("builtin"))
        .and_then(toml::Value::as_array)
        .unwrap_or_else(|| {
            panic!(
                "{} has no [[package.metadata.builtin]] entries",
                manifest.display()
            )
        });
    let mut seen: Vec<String> = Vec::new();
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let field = |key: &str| {
                v.get(key).map(|x| {
                    x.as_str()
                        .unwrap_or_else(|| panic!("builtin #{i}: `{key}` must be a string"))
                        .to_string()
                })
            };
            let required = |key: &str| {
                field(key).unwrap_or_else(|| panic!("builtin #{i}: `{key}` is required"))
            };
            let aliases: Vec<String> = v
                .get("aliases")
                .and_then(toml::Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|x| {
                            x.as_str()
                                .unwrap_or_else(|| panic!("builtin #{i}: aliases must be strings"))
                                .to_string()
                        })
                        .collect()
                })
                .unwrap_or_default();
            let source = match (field("package"), field("project")) {
                (Some(p), None) => Source::Package(p),
                (None, Some(d)) => Source::Project(d),
                _ => panic!("builtin #{i}: give exactly one of `package` and `project`"),
            };
            let e = Entry {
                name: required("name"),
                aliases,
                source,
                native: field("native"),
                preset: field("preset"),
            };
            for spelling in std::iter::once(&e.name).chain(&e.aliases) {
                assert!(
                    !seen.contains(spelling),
                    "builtin `{spelling}` is listed twice"
                );
                seen.push(spelling.clone());
            }
            if let Some(ty) = &e.native {
                assert!(
                    ty.split("::").all(
                        |p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_')
                    ),
                    "builtin `{}`: native `{ty}` is not a type path",
                    e.name
                );
            }
            e
        })
        .collect()
}
