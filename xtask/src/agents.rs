//! `cargo xtask agents`: the agent suite with the real CLIs. Installs the
//! four agents from npm at the versions their presets were tested with
//! (the `tested: TestedWith { package, version, bin }` of each preset in
//! `policy/src/agent/<name>.rs`, read from the source, since xtask depends
//! on no workspace crate) into
//! `target/agents/npm` (or `/opt/palisade-agents/npm`, see
//! [`default_prefix`]), then runs every `cli/tests/agents_*.rs` suite's
//! ignored tests with `PALISADE_AGENTS_BIN` pointing at the installed
//! executables. Fails loudly when node or npm is missing or the registry
//! cannot be reached: it never passes without the agents.
//!
//! `PALISADE_AGENTS_NPM_PREFIX=DIR` uses an existing prefix instead; the
//! install is skipped when every pinned version is already there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The agents, by preset file name (`policy/src/agent/<name>.rs`).
const AGENTS: [&str; 4] = ["claude", "codex", "opencode", "pi"];

/// One preset's `tested` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pinned {
    package: String,
    version: String,
    bin: String,
}

/// The `tested` entries of the four presets, read from their source.
fn pinned(root: &Path) -> Result<Vec<Pinned>, String> {
    AGENTS
        .iter()
        .map(|a| {
            let path = root.join("policy/src/agent").join(format!("{a}.rs"));
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            parse_tested(&text).map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect()
}

/// The one `tested: TestedWith { package: "…", version: "…", bin: "…" }`
/// of a preset file; anything else is an error, never a guess.
fn parse_tested(text: &str) -> Result<Pinned, String> {
    let mut blocks = text.match_indices("tested: TestedWith {");
    let (start, _) = blocks.next().ok_or("no `tested: TestedWith { … }` entry")?;
    if blocks.next().is_some() {
        return Err("more than one `tested: TestedWith` entry".to_owned());
    }
    let rest = text.get(start..).unwrap_or_default();
    let block = rest
        .get(..rest.find('}').ok_or("an unclosed `TestedWith {`")?)
        .unwrap_or_default();
    let field = |name: &str| -> Result<String, String> {
        let key = format!("{name}: \"");
        let at = block
            .find(&key)
            .ok_or_else(|| format!("`TestedWith` has no `{name}: \"…\"`"))?;
        let value = block.get(at + key.len()..).unwrap_or_default();
        let end = value
            .find('"')
            .ok_or_else(|| format!("`{name}` is not a closed string"))?;
        let v = value.get(..end).unwrap_or_default();
        if v.is_empty() || v.contains(['\\', ' ']) {
            return Err(format!("`{name}` = `{v}` is not a plain value"));
        }
        Ok(v.to_owned())
    };
    Ok(Pinned {
        package: field("package")?,
        version: field("version")?,
        bin: field("bin")?,
    })
}

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
        None => default_prefix(root),
    };
    require("node", &["--version"])?;
    require("npm", &["--version"])?;
    let pins = pinned(root)?;
    let specs: Vec<String> = pins
        .iter()
        .map(|t| format!("{}@{}", t.package, t.version))
        .collect();
    let missing: Vec<&String> = pins
        .iter()
        .zip(&specs)
        .filter(|(t, _)| !installed(&prefix, t))
        .map(|(_, s)| s)
        .collect();
    if missing.is_empty() {
        eprintln!(
            "xtask: the pinned agents are installed in {}; no npm install",
            prefix.display()
        );
    } else {
        install(&prefix, &specs)?;
        for t in &pins {
            if !installed(&prefix, t) {
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
    for t in &pins {
        let exe = bin.join(&t.bin);
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

/// Where the sandbox hides the host: its own `/tmp`, and the host masks
/// of the governed profile (`palisade_isolate::HOST_MASKS`).
const HIDDEN: &[&str] = &[
    "/tmp", "/var", "/run", "/home", "/root", "/mnt", "/media", "/srv", "/boot",
];

/// `target/agents/npm`, unless the checkout lies where the sandbox hides
/// the host (a clone under `/tmp`, as CI may make): the agents run inside
/// the sandbox, so their install must be in its view; then
/// `/opt/palisade-agents/npm`.
fn default_prefix(root: &Path) -> PathBuf {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if HIDDEN.iter().any(|h| root.starts_with(h)) {
        PathBuf::from("/opt/palisade-agents/npm")
    } else {
        root.join("target/agents/npm")
    }
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

/// Whether the package `t` is in `prefix` at its pinned version.
/// Whether `t` is installed in `prefix` at its pinned version *and* its
/// executable is there: an interrupted `npm install` can leave the manifest
/// without the `.bin` link, and that must reinstall, not fail later.
fn installed(prefix: &Path, t: &Pinned) -> bool {
    // `exists` follows the link: a dangling `.bin` entry is not installed.
    if !prefix.join("node_modules/.bin").join(&t.bin).exists() {
        return false;
    }
    let manifest = prefix
        .join("node_modules")
        .join(&t.package)
        .join("package.json");
    std::fs::read_to_string(manifest)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|v| v.get("version").and_then(|x| x.as_str()) == Some(t.version.as_str()))
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

/// The agent suites: `cli/tests/agents_*.rs` but `agents_bench.rs` (the
/// shared harness lives in `cli/tests/agents_common/`).
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
        // the bench's turns are `cargo xtask bench agents`, not the suite
        .filter(|n| n != "agents_bench")
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_presets_pin_an_exact_npm_version() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let pins = pinned(&root).unwrap();
        let got: Vec<(&str, &str)> = pins
            .iter()
            .map(|p| (p.package.as_str(), p.bin.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("@anthropic-ai/claude-code", "claude"),
                ("@openai/codex", "codex"),
                ("opencode-ai", "opencode"),
                ("@mariozechner/pi-coding-agent", "pi")
            ]
        );
        for p in &pins {
            assert!(
                p.version.split('.').count() == 3
                    && p.version.split('.').all(|n| n.parse::<u32>().is_ok()),
                "{p:?} is not an exact version"
            );
        }
    }

    #[test]
    fn the_install_is_where_the_sandbox_shows_it() {
        assert_eq!(
            default_prefix(Path::new("/tmp/clone")),
            Path::new("/opt/palisade-agents/npm")
        );
        assert_eq!(
            default_prefix(Path::new("/home/op/palisade")),
            Path::new("/opt/palisade-agents/npm")
        );
        // control: a checkout in view keeps its own target
        assert_eq!(
            default_prefix(Path::new("/opt/src/palisade")),
            Path::new("/opt/src/palisade/target/agents/npm")
        );
    }

    #[test]
    fn a_half_installed_agent_is_reinstalled() {
        let dir =
            std::env::temp_dir().join(format!("palisade-xtask-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Pinned {
            package: "@scope/agent".to_owned(),
            version: "1.2.3".to_owned(),
            bin: "agent".to_owned(),
        };
        let pkg = dir.join("node_modules/@scope/agent");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("package.json"), r#"{"version":"1.2.3"}"#).unwrap();
        // The manifest alone (an interrupted install): not installed.
        assert!(!installed(&dir, &t));
        let bin = dir.join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink("../@scope/agent/missing.js", bin.join("agent")).unwrap();
        // A dangling link: not installed.
        assert!(!installed(&dir, &t));
        std::fs::write(pkg.join("missing.js"), "").unwrap();
        // control: manifest and executable, at the pinned version
        assert!(installed(&dir, &t));
        std::fs::write(pkg.join("package.json"), r#"{"version":"1.2.4"}"#).unwrap();
        assert!(!installed(&dir, &t));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_preset_without_one_tested_entry_is_an_error() {
        let one = "tested: TestedWith {\n package: \"a\",\n version: \"1.2.3\",\n bin: \"a\",\n },";
        assert_eq!(parse_tested(one).unwrap().version, "1.2.3");
        assert!(parse_tested("nothing here").is_err());
        assert!(parse_tested(&format!("{one}\n{one}")).is_err());
        assert!(parse_tested(&one.replace("version", "verzion")).is_err());
        assert!(parse_tested(&one.replace("1.2.3", "^1")).is_ok());
        assert!(parse_tested(&one.replace("1.2.3", "")).is_err());
    }
}
