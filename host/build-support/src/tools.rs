//! The componentizers a Python or JavaScript project is built with, at the version the project
//! pins: found in `$COMPONENTIZE_PY` / `$COMPONENTIZE_JS`, the project's own install
//! (`.venv`, `node_modules`), or the ragen-gym checkout's (`scripts/setup.sh` installs them into
//! `.venv` and `.tools/js`); installed into the project when allowed, else named in the error
//! with the command that installs them.

use crate::error::BuildError;
use crate::project::{Language, Project};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A componentizer found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// The executable.
    pub path: PathBuf,
    /// Its version (`--version`).
    pub version: String,
}

/// Where the checkout's `scripts/setup.sh` installs componentize-js (`npm ci` of
/// `sdk/js/package.json`).
pub const CHECKOUT_JS_TOOLS: &str = ".tools/js";

struct Spec {
    name: &'static str,
    env_var: &'static str,
    in_project: &'static str,
    in_checkout: String,
}

fn spec(language: Language) -> Spec {
    match language {
        Language::Python => Spec {
            name: "componentize-py",
            env_var: "COMPONENTIZE_PY",
            in_project: ".venv/bin/componentize-py",
            in_checkout: ".venv/bin/componentize-py".into(),
        },
        _ => Spec {
            name: "componentize-js",
            env_var: "COMPONENTIZE_JS",
            in_project: "node_modules/.bin/componentize-js",
            in_checkout: format!("{CHECKOUT_JS_TOOLS}/node_modules/.bin/componentize-js"),
        },
    }
}

/// The last word of `tool --version`, if it runs.
fn version_of(path: &Path) -> Option<String> {
    let out = Command::new(path).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .last()
        .map(|v| v.trim_start_matches('v').to_string())
}

/// The command that installs the pinned componentizer into the project.
pub fn install_command(project: &Project) -> String {
    let dir = project.dir.display();
    match project.language {
        Language::Python => format!(
            "python3 -m venv {dir}/.venv && {dir}/.venv/bin/pip install -r {dir}/requirements-build.txt"
        ),
        _ => format!("npm ci --prefix {dir}"),
    }
}

/// Find the componentizer of `project` at its pinned version: `$COMPONENTIZE_PY` or
/// `$COMPONENTIZE_JS` (used whatever its version), then the project's install, then
/// `checkout`'s. With `install`, a missing tool is installed into the project (this needs the
/// PyPI or npm registry once); otherwise the error names the command.
///
/// # Errors
/// [`BuildError::ToolMissing`] with the places looked in and the install command;
/// [`BuildError::CommandFailed`] when installing fails.
pub fn find_or_install(
    project: &Project,
    checkout: Option<&Path>,
    install: bool,
) -> Result<Tool, BuildError> {
    let s = spec(project.language);
    if let Some(path) = std::env::var_os(s.env_var).map(PathBuf::from) {
        let version = version_of(&path).ok_or_else(|| BuildError::ToolMissing {
            tool: s.name.into(),
            version: project.tool_version.clone(),
            looked: format!("${}={} (does not run)", s.env_var, path.display()),
            install: install_command(project),
        })?;
        if version != project.tool_version {
            eprintln!(
                "warning: ${} is {} {version}; {} pins {}",
                s.env_var,
                s.name,
                project.file.display(),
                project.tool_version
            );
        }
        return Ok(Tool { path, version });
    }
    let mut candidates = vec![project.dir.join(s.in_project)];
    candidates.extend(checkout.map(|c| c.join(&s.in_checkout)));
    let mut looked = Vec::new();
    for path in &candidates {
        match version_of(path) {
            Some(v) if v == project.tool_version => {
                return Ok(Tool {
                    path: path.clone(),
                    version: v,
                });
            }
            Some(v) => looked.push(format!("{} ({v})", path.display())),
            None => looked.push(path.display().to_string()),
        }
    }
    let missing = || BuildError::ToolMissing {
        tool: s.name.into(),
        version: project.tool_version.clone(),
        looked: format!("${}, {}", s.env_var, looked.join(", ")),
        install: install_command(project),
    };
    if !install {
        return Err(missing());
    }
    eprintln!(
        "{} {} is not installed: installing it into {} (`{}`; needs the package registry once)",
        s.name,
        project.tool_version,
        project.dir.display(),
        install_command(project)
    );
    match project.language {
        Language::Python => {
            let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
            run(Command::new(python)
                .args(["-m", "venv"])
                .arg(project.dir.join(".venv")))?;
            run(Command::new(project.dir.join(".venv/bin/pip"))
                .args(["install", "--disable-pip-version-check", "-r"])
                .arg(project.dir.join("requirements-build.txt")))?;
        }
        _ => {
            run(Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&project.dir))?;
        }
    }
    let path = candidates.swap_remove(0);
    match version_of(&path) {
        Some(version) if version == project.tool_version => Ok(Tool { path, version }),
        _ => Err(missing()),
    }
}

/// Run `cmd`, capturing its output; a failure carries the command line and the tail of its
/// stderr (or stdout when stderr is empty).
///
/// # Errors
/// [`BuildError::CommandFailed`].
pub fn run(cmd: &mut Command) -> Result<std::process::Output, BuildError> {
    let line = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = cmd.output().map_err(|e| BuildError::CommandFailed {
        command: line.clone(),
        status: e.to_string(),
        tail: String::new(),
    })?;
    if out.status.success() {
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = if stderr.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        stderr
    };
    let lines: Vec<&str> = text.lines().collect();
    Err(BuildError::CommandFailed {
        command: line,
        status: out.status.to_string(),
        tail: lines[lines.len().saturating_sub(40)..].join("\n"),
    })
}
