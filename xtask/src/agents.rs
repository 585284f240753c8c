//! `cargo xtask agents`: the agent suite with the real CLIs. Installs the
//! four agents from npm at the versions their presets were tested with
//! (`palisade_policy::agent::preset(a).tested`) into
//! `target/agents/npm`, then runs every `cli/tests/agents_*.rs` suite's
//! ignored tests with `PALISADE_AGENTS_BIN` pointing at the installed
//! executables. Fails loudly when node or npm is missing or the registry
//! cannot be reached: it never passes without the agents.
//!
//! `PALISADE_AGENTS_NPM_PREFIX=DIR` uses an existing prefix instead; the
//! install is skipped when every pinned version is already there.

use std::path::{Path, PathBuf};
use std::process::Command;

use palisade_policy::agent::{AgentName, preset};

/// Telemetry, update checks and npm's noise off for the install and the suite.
const QUIET_ENV: &[(&str, &str)] = &[
    ("DO_NOT_TRACK", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("NPM_CONFIG_UPDATE_NOTIFIER", "false"),
    ("NPM_CONFIG_FUND", "false"),
    ("NPM_CONFIG_AUDIT", "false"),
];

/// Runs `cargo xtask agents`.
pub(crate) fn agents(root: &Path) -> Result<(), String> {
    let prefix = match std::env::var_os("PALISADE_AGENTS_NPM_PREFIX") {
        Some(p) => PathBuf::from(p),
        None => root.join("target/agents/npm"),
    };
    require("node", &["--version"])?;
    require("npm", &["--version"])?;
    let specs: Vec<String> = AgentName::ALL
        .iter()
        .map(|a| {
            let t = preset(*a).tested;
            format!("{}@{}", t.package, t.version)
        })
        .collect();
    let missing: Vec<&String> = AgentName::ALL
        .iter()
        .zip(&specs)
        .filter(|(a, _)| !installed(&prefix, **a))
        .map(|(_, s)| s)
        .collect();
    if missing.is_empty() {
        eprintln!(
            "xtask: the pinned agents are installed in {}; no npm install",
            prefix.display()
        );
    } else {
        install(&prefix, &specs)?;
        for a in AgentName::ALL {
            if !installed(&prefix, a) {
                let t = preset(a).tested;
                return Err(format!(
                    "npm install did not leave {}@{} in {}",
                    t.package,
                    t.version,
                    prefix.display()
                ));
            }
        }
    }
    let bin = prefix.join("node_modules/.bin");
    for a in AgentName::ALL {
        let exe = bin.join(preset(a).tested.bin);
        if !exe.exists() {
            return Err(format!("{} is missing after the install", exe.display()));
        }
    }
    let mut cmd = crate::cargo(root);
    cmd.args(["test", "-p", "palisade-cli"]);
    let suites = suites(root)?;
    if suites.is_empty() {
        return Err("no cli/tests/agents_*.rs suite found".to_owned());
    }
    for s in &suites {
        cmd.args(["--test", s]);
    }
    cmd.args(["--", "--ignored"]);
    cmd.env("PALISADE_AGENTS_BIN", &bin);
    for (k, v) in QUIET_ENV {
        cmd.env(k, v);
    }
    crate::run(&mut cmd)
}

/// Fails naming `program` when it cannot run.
fn require(program: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(program).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`{program} {}` failed ({}): the agent suite needs Node.js 20+ and npm",
            args.join(" "),
            o.status
        )),
        Err(e) => Err(format!(
            "`{program}` cannot run ({e}): the agent suite needs Node.js 20+ and npm on PATH (the CI machine has Node 20 and npm 11)"
        )),
    }
}

/// Whether `agent`'s package is in `prefix` at its pinned version.
fn installed(prefix: &Path, agent: AgentName) -> bool {
    let t = preset(agent).tested;
    let manifest = prefix
        .join("node_modules")
        .join(t.package)
        .join("package.json");
    std::fs::read_to_string(manifest)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|v| v.get("version").and_then(|x| x.as_str()) == Some(t.version))
}

/// `npm install --prefix PREFIX` of the pinned packages; a failure (the
/// registry unreachable) is an error, never a skip.
fn install(prefix: &Path, specs: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    let mut cmd = Command::new("npm");
    cmd.arg("install")
        .arg("--prefix")
        .arg(prefix)
        .args(["--no-audit", "--no-fund", "--save-exact"])
        .args(specs);
    for (k, v) in QUIET_ENV {
        cmd.env(k, v);
    }
    crate::run(&mut cmd).map_err(|e| {
        format!("{e}: could not install the pinned agent CLIs from npm (is the registry reachable?); the agent suite cannot run without them")
    })
}

/// The agent suites: `cli/tests/agents_*.rs` (the shared harness lives in
/// `cli/tests/agents_common/`).
fn suites(root: &Path) -> Result<Vec<String>, String> {
    let dir = root.join("cli/tests");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| {
            n.strip_prefix("agents_")
                .and_then(|r| r.strip_suffix(".rs"))
                .map(|r| format!("agents_{r}"))
        })
        .collect();
    out.sort();
    Ok(out)
}
