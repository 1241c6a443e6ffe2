//! `ragen-gym new NAME --lang rust|python|js [--kind env|reward]`: write a plugin project that
//! `ragen-gym build` turns into a component (the author's guide: `docs/plugins.md`).
//!
//! A Rust crate depends on this checkout's SDK by path (the SDK is not on crates.io; `--sdk`
//! picks another) and ships a `Cargo.lock` cut from the workspace's, so it builds offline with
//! the crate versions this checkout builds. A Python or JavaScript project vendors the helper,
//! the `ragen:gym` WIT and the componentizer pin (componentize-js with its `package-lock.json`).

use super::templates::{Kind, Lang, Vars, files};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Arguments of `ragen-gym new`.
#[derive(clap::Args)]
pub struct Args {
    /// Package name: lowercase letters, digits, `-` and `_`, starting with a letter.
    pub name: String,
    /// The language.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// What the plugin exports (reward functions: Rust only).
    #[arg(long, value_enum, default_value = "env")]
    pub kind: Kind,
    /// The directory to create (default `./NAME`); it must not exist or be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The plugin id, `namespace/Name-vN` (default `local/<Name>-v0`).
    #[arg(long)]
    pub id: Option<String>,
    /// Rust: the ragen-gym SDK directory the crate depends on (default: the `sdk/` of the
    /// checkout this `ragen-gym` was built from).
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
}

/// The checkout this binary was built from, if it is still there.
pub fn checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(root)
        .ok()
        .filter(|r| r.join("sdk/Cargo.toml").is_file())
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok {
        bail!(
            "name `{name}`: use 1 to 64 lowercase letters, digits, `-` or `_`, starting with a letter"
        );
    }
    Ok(())
}

/// `my-game` -> `MyGame`.
fn camel(name: &str) -> String {
    name.split(['-', '_'])
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn sdk_dir(given: Option<&Path>) -> anyhow::Result<String> {
    let dir = match given {
        Some(d) => std::fs::canonicalize(d).with_context(|| format!("--sdk {}", d.display()))?,
        None => checkout()
            .map(|c| c.join("sdk"))
            .context("the ragen-gym checkout this binary was built from is gone: pass --sdk DIR (the `sdk/` of a checkout)")?,
    };
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    if !manifest
        .lines()
        .any(|l| l.trim() == "name = \"ragen-gym-sdk\"")
    {
        bail!(
            "{}: not the ragen-gym SDK (its Cargo.toml does not name ragen-gym-sdk)",
            dir.display()
        );
    }
    // A TOML basic string.
    Ok(dir
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\""))
}

/// Let cargo drop from the scaffold's `Cargo.lock` the dependency edges of features the crate
/// does not enable (the workspace enables more, e.g. `serde` on `semver`); it keeps every locked
/// version. Offline first; online only when cargo's index cache lacks something.
fn settle_lock(dir: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut why = String::new();
    for offline in [true, false] {
        let mut cmd = std::process::Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(dir.join("Cargo.toml"))
            .stdout(std::process::Stdio::null());
        if offline {
            cmd.arg("--offline");
        }
        let out = cmd.output().context("running cargo metadata")?;
        if out.status.success() {
            return Ok(());
        }
        why = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    bail!(
        "`cargo metadata` could not settle {}/Cargo.lock:\n{why}",
        dir.display()
    )
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let class = camel(&args.name);
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("local/{class}-v0"));
    ragen_gym_build_support::project::check_id(&id).map_err(|e| anyhow::anyhow!("--id: {e}"))?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        bail!("{} exists and is not empty", dir.display());
    }
    let what = match args.kind {
        Kind::Env => "environment",
        Kind::Reward => "reward-function",
    };
    let vars = Vars {
        name: args.name.clone(),
        class,
        id: id.clone(),
        description: format!("A ragen-gym {what} plugin."),
        sdk: if args.lang == Lang::Rust {
            sdk_dir(args.sdk.as_deref())?
        } else {
            String::new()
        },
    };
    let files = files(args.lang, args.kind, &vars)?;
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.lang == Lang::Rust {
        settle_lock(&dir)?;
    }
    println!(
        "created {} ({:?} {what} plugin `{id}`, {} files)",
        dir.display(),
        args.lang,
        files.len()
    );
    println!("next: ragen-gym build {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_classes_and_bad_names_are_refused() {
        assert_eq!(camel("my-game_2"), "MyGame2");
        assert!(check_name("guess").is_ok());
        for bad in ["", "Guess", "1x", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_scaffold_is_refused_over_a_non_empty_directory() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("keep"), "x").unwrap();
        let err = run(Args {
            name: "guess".into(),
            lang: Lang::Python,
            kind: Kind::Env,
            dir: Some(tmp.path().to_path_buf()),
            id: None,
            sdk: None,
        })
        .unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
