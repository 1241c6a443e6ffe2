//! The files `ragen-gym new` writes, embedded at compile time: the templates of
//! `sdk/templates/`, the Python and JavaScript helpers (`sdk/python/ragen_gym`, `sdk/js`), the
//! pinned componentizers (`sdk/python/requirements-build.txt`, `sdk/js/package*.json`) and the
//! `ragen:gym` WIT. `{{key}}` placeholders are filled from [`Vars`].

use super::lockfile::{WORKSPACE_LOCK, scaffold_lock};
use anyhow::Context;

/// The language of a scaffold.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// A Rust crate on the ragen-gym SDK.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// What the plugin exports.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An environment (`ragen:gym/environment`).
    Env,
    /// A reward function (`ragen:gym/reward-function`; Rust only).
    Reward,
}

/// The values of the placeholders.
#[derive(Debug, Clone)]
pub struct Vars {
    /// Package name.
    pub name: String,
    /// The class or type name (CamelCase of the name).
    pub class: String,
    /// The plugin id.
    pub id: String,
    /// One sentence.
    pub description: String,
    /// Rust: the SDK directory (absolute).
    pub sdk: String,
}

macro_rules! embed {
    ($path:literal) => {
        include_str!(concat!("../../../../../", $path))
    };
}

const WIT: [(&str, &str); 6] = [
    ("wit/environment.wit", embed!("wit/environment.wit")),
    ("wit/expert.wit", embed!("wit/expert.wit")),
    ("wit/host.wit", embed!("wit/host.wit")),
    ("wit/reward-function.wit", embed!("wit/reward-function.wit")),
    ("wit/types.wit", embed!("wit/types.wit")),
    ("wit/worlds.wit", embed!("wit/worlds.wit")),
];
const JS_TOOLS_PACKAGE: &str = embed!("sdk/js/package.json");
const JS_TOOLS_LOCK: &str = embed!("sdk/js/package-lock.json");
/// The `name` of `sdk/js/package.json`, replaced by the scaffold's in its lock file.
const JS_TOOLS_NAME: &str = "ragen-gym-js-tools";

fn render(text: &str, vars: &Vars, extra: &[(&str, &str)]) -> String {
    let mut out = text
        .replace("{{name}}", &vars.name)
        .replace("{{class}}", &vars.class)
        .replace("{{id}}", &vars.id)
        .replace("{{description}}", &vars.description)
        .replace("{{sdk}}", &vars.sdk)
        .replace("{{rust_version}}", env!("CARGO_PKG_RUST_VERSION"));
    for (key, value) in extra {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// The `devDependencies` of `sdk/js/package.json` (componentize-js and what it needs), as the
/// scaffold's `package.json` writes them: they must match the lock file `npm ci` installs from.
fn dev_dependencies() -> anyhow::Result<String> {
    let v: serde_json::Value = serde_json::from_str(JS_TOOLS_PACKAGE)?;
    let deps = v
        .get("devDependencies")
        .context("sdk/js/package.json has no devDependencies")?;
    Ok(serde_json::to_string_pretty(deps)?.replace('\n', "\n  "))
}

/// The files of a new project, as (relative path, contents).
///
/// # Errors
/// A reward function in Python or JavaScript (the helpers export environments only).
pub fn files(lang: Lang, kind: Kind, vars: &Vars) -> anyhow::Result<Vec<(String, String)>> {
    let mut files: Vec<(&str, String)> = Vec::new();
    match (lang, kind) {
        (Lang::Rust, _) => {
            files.push((
                "Cargo.toml",
                render(embed!("sdk/templates/rust/Cargo.toml"), vars, &[]),
            ));
            let lock = scaffold_lock(
                WORKSPACE_LOCK,
                &vars.name,
                "0.1.0",
                &["ragen-gym-sdk", "serde"],
            )?;
            files.push(("Cargo.lock", lock));
            let lib = match kind {
                Kind::Env => embed!("sdk/templates/rust/env.rs"),
                Kind::Reward => embed!("sdk/templates/rust/reward.rs"),
            };
            files.push(("src/lib.rs", render(lib, vars, &[])));
            files.push((".gitignore", embed!("sdk/templates/rust/gitignore").into()));
        }
        (_, Kind::Reward) => anyhow::bail!(
            "the Python and JavaScript helpers export environments only; write reward functions in Rust (`--lang rust --kind reward`)"
        ),
        (Lang::Python, Kind::Env) => {
            files.push((
                "pyproject.toml",
                render(embed!("sdk/templates/python/pyproject.toml"), vars, &[]),
            ));
            files.push((
                "app.py",
                render(embed!("sdk/templates/python/app.py"), vars, &[]),
            ));
            files.push((
                "requirements-build.txt",
                embed!("sdk/python/requirements-build.txt").into(),
            ));
            files.push((
                "ragen_gym/__init__.py",
                embed!("sdk/python/ragen_gym/__init__.py").into(),
            ));
            files.push((
                "ragen_gym/_component.py",
                embed!("sdk/python/ragen_gym/_component.py").into(),
            ));
            files.push((
                ".gitignore",
                embed!("sdk/templates/python/gitignore").into(),
            ));
        }
        (Lang::Js, Kind::Env) => {
            let deps = dev_dependencies()?;
            files.push((
                "package.json",
                render(
                    embed!("sdk/templates/js/package.json"),
                    vars,
                    &[("dev_dependencies", &deps)],
                ),
            ));
            let quoted = |n: &str| format!("\"name\": \"{n}\"");
            files.push((
                "package-lock.json",
                JS_TOOLS_LOCK.replace(&quoted(JS_TOOLS_NAME), &quoted(&vars.name)),
            ));
            files.push((
                "env.js",
                render(embed!("sdk/templates/js/env.js"), vars, &[]),
            ));
            files.push(("ragen-gym.js", embed!("sdk/js/ragen-gym.js").into()));
            files.push((".gitignore", embed!("sdk/templates/js/gitignore").into()));
        }
    }
    if lang != Lang::Rust {
        files.extend(WIT.iter().map(|(p, t)| (*p, (*t).to_string())));
    }
    Ok(files.into_iter().map(|(p, t)| (p.to_string(), t)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars {
            name: "my-game".into(),
            class: "MyGame".into(),
            id: "me/MyGame-v0".into(),
            description: "A game.".into(),
            sdk: "/x/sdk".into(),
        }
    }

    /// A scaffold resolves the contract only when it carries every file of `wit/` (the expert
    /// interface of 0.1.1 was once left out, and Python and JavaScript builds failed).
    #[test]
    fn scaffolds_carry_every_contract_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| format!("wit/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = WIT.iter().map(|(p, _)| (*p).to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn every_placeholder_is_filled() {
        for (lang, kind) in [
            (Lang::Rust, Kind::Env),
            (Lang::Rust, Kind::Reward),
            (Lang::Python, Kind::Env),
            (Lang::Js, Kind::Env),
        ] {
            for (path, text) in files(lang, kind, &vars()).unwrap() {
                assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
            }
        }
        assert!(
            files(Lang::Python, Kind::Reward, &vars())
                .unwrap_err()
                .to_string()
                .contains("Rust")
        );
    }

    /// `docs/plugins.md` shows each scaffold's env (and project file) complete, as `new` writes
    /// it; the env sources stay within the bounds (Rust 25 lines, Python and JS 40).
    #[test]
    fn the_guide_shows_the_scaffolds_as_written() {
        let guide = embed!("docs/plugins.md");
        let vars = Vars {
            name: "guess".into(),
            class: "Guess".into(),
            id: "local/Guess-v0".into(),
            description: "A ragen-gym environment plugin.".into(),
            sdk: "/path/to/ragen-gym/sdk".into(),
        };
        for (lang, source, project, most) in [
            (Lang::Rust, "src/lib.rs", "Cargo.toml", 25),
            (Lang::Python, "app.py", "pyproject.toml", 40),
            (Lang::Js, "env.js", "package.json", 40),
        ] {
            let files = files(lang, Kind::Env, &vars).unwrap();
            for name in [source, project] {
                let text = &files.iter().find(|(p, _)| p == name).unwrap().1;
                assert!(
                    guide.contains(text.trim_end()),
                    "docs/plugins.md lacks {lang:?} {name}:\n{text}"
                );
            }
            let lines = files
                .iter()
                .find(|(p, _)| p == source)
                .unwrap()
                .1
                .lines()
                .count();
            assert!(lines <= most, "{lang:?} {source}: {lines} lines");
        }
        let reward = Vars {
            class: "Short".into(),
            id: "local/Short-v0".into(),
            ..vars
        };
        let lib = files(Lang::Rust, Kind::Reward, &reward)
            .unwrap()
            .into_iter()
            .find(|(p, _)| p == "src/lib.rs")
            .unwrap()
            .1;
        assert!(
            guide.contains(lib.trim_end()),
            "docs/plugins.md lacks the reward function"
        );
    }

    #[test]
    fn the_js_lock_names_the_scaffold_and_pins_what_package_json_pins() {
        let files = files(Lang::Js, Kind::Env, &vars()).unwrap();
        let get = |name: &str| -> serde_json::Value {
            serde_json::from_str(&files.iter().find(|(p, _)| p == name).unwrap().1).unwrap()
        };
        let (package, lock) = (get("package.json"), get("package-lock.json"));
        assert_eq!(lock["name"], "my-game");
        assert_eq!(lock["packages"][""]["name"], "my-game");
        assert_eq!(
            lock["packages"][""]["devDependencies"],
            package["devDependencies"]
        );
        assert_eq!(package["ragen-gym"]["id"], "me/MyGame-v0");
    }
}
