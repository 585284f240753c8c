//! `palisade check`: validate hub workflows, provider options and lints.
//!
//! PATH is a repository root holding `.paseo/`, a `.paseo` folder, or a
//! single-file workflow. Output is rustc-style text (default), JSON or
//! SARIF 2.1.0. Exit status: 0 without errors (warnings allowed), 1 with
//! errors, 2 on usage or IO errors.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use palisade_schema::render::Renderer;
use palisade_schema::{Diagnostic, Severity};
use serde_json::{Value, json};

use crate::bundle::Input;

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// rustc-style diagnostics with the source line and a caret.
    Human,
    /// `{"diagnostics": [...]}`.
    Json,
    /// SARIF 2.1.0 for code-scanning tools.
    Sarif,
}

/// Arguments of `palisade check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root (holding `.paseo/`), a `.paseo` folder, or a
    /// single-file workflow.
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Also check this host policy file (`palisade.toml`).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
}

/// One checked document: its display name and text, for snippets.
struct Source {
    name: String,
    text: String,
}

/// What was checked, for the summary line.
struct Checked {
    what: String,
    files: usize,
    /// `(triggers, steps)` when the configuration parsed.
    counts: Option<(usize, usize)>,
}

fn counts(config: Option<&palisade_schema::HubConfig>) -> Option<(usize, usize)> {
    config.map(|c| {
        (
            c.triggers.len(),
            c.triggers.iter().map(|t| t.steps.len()).sum(),
        )
    })
}

/// Runs `palisade check`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    // `palisade check --policy FILE` alone checks only the policy when the
    // current folder has no `.paseo`.
    let policy_only =
        args.policy.is_some() && args.path == Path::new(".") && !Path::new(".paseo").is_dir();
    let (mut diags, mut sources, mut checked, config) = if policy_only {
        let none = Checked {
            what: String::new(),
            files: 0,
            counts: None,
        };
        (Vec::new(), Vec::new(), none, None)
    } else {
        check_path(&args.path)?
    };
    if let Some(policy) = &args.policy {
        let text = crate::input::read_text(policy, crate::input::Kind::Policy)?;
        let name = policy.display().to_string();
        diags.extend(check_policy(&name, &text)?);
        if let Some((file, config, layout)) = &config {
            diags.extend(provider_sandboxes(file, config, layout, &sources));
        }
        checked.what = if checked.what.is_empty() {
            name.clone()
        } else {
            format!("{} and {name}", checked.what)
        };
        checked.files += 1;
        sources.push(Source { name, text });
    }
    diags.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    let out = match args.format {
        Format::Human => human(&diags, &sources, &checked),
        Format::Json => json_report(&diags),
        Format::Sarif => sarif(&diags),
    };
    print!("{out}");
    Ok(ExitCode::from(u8::from(
        diags.iter().any(Diagnostic::is_error),
    )))
}

/// The host-policy parser (`palisade.toml`): takes the policy's display
/// name and text, returns its diagnostics (errors and lints).
pub(crate) fn check_policy(name: &str, text: &str) -> Result<Vec<Diagnostic>, String> {
    Ok(match palisade_schema::host_policy::parse(name, text) {
        Ok(parsed) => parsed.into_parts().1,
        Err(refused) => refused.into_vec(),
    })
}

/// The workflow's agents whose options turn on a provider sandbox, which
/// cannot start inside palisade's (`provider_sandbox_unavailable`): an
/// error when the provider then refuses to work, a warning when it would
/// run unsandboxed. Located at the option's key (file, line, column and
/// path in that file), as the schema's own lints are.
fn provider_sandboxes(
    file: &str,
    config: &palisade_schema::HubConfig,
    layout: &Layout,
    sources: &[Source],
) -> Vec<Diagnostic> {
    use palisade_schema::diagnostic::Path as At;
    use palisade_schema::model::AgentRef;
    // Where each agent is authored: (file, path of its mapping there).
    let named = config.agents.iter().map(|a| {
        let at = At::root().key("agents").key(a.name.clone());
        let in_file = match layout {
            Layout::Bundle { hub } => hub.clone(),
            Layout::File => file.to_owned(),
        };
        (in_file, at, &a.agent)
    });
    let inline = config.triggers.iter().enumerate().flat_map(|(t, trigger)| {
        // A bundle's trigger is one workflow file, found by its `name`.
        let (in_file, base) = match layout {
            Layout::Bundle { hub } => (
                workflow_file(sources, hub, &trigger.name).unwrap_or_else(|| file.to_owned()),
                At::root(),
            ),
            Layout::File => (file.to_owned(), At::root().key("triggers").index(t)),
        };
        trigger
            .steps
            .iter()
            .enumerate()
            .filter_map(move |(s, step)| match &step.agent {
                AgentRef::Inline(agent) => Some((
                    in_file.clone(),
                    base.clone().key("steps").index(s).key("agent"),
                    agent,
                )),
                _ => None,
            })
    });
    named
        .chain(inline)
        .filter_map(|(in_file, at, agent)| {
            let options = agent.options.as_ref()?;
            let found = palisade_policy::provider_sandbox::check(&agent.provider, options)?;
            let make = if found.fails_closed {
                Diagnostic::error
            } else {
                Diagnostic::warning
            };
            let path = found
                .key
                .split('.')
                .fold(at.key("options"), |p, k| p.key(k));
            let mut d = make(palisade_policy::provider_sandbox::CODE, found.message());
            if let Some(pos) = position(sources, &in_file, &path) {
                d = d.at(pos.line, pos.column);
            }
            d.file = in_file;
            d.path = path;
            Some(d)
        })
        .collect()
}

/// The line and column of `path` in the source named `file` (of the
/// nearest authored ancestor when the key itself is not written there).
fn position(
    sources: &[Source],
    file: &str,
    path: &palisade_schema::diagnostic::Path,
) -> Option<palisade_schema::yaml::Pos> {
    let source = sources.iter().find(|s| s.name == file)?;
    let root = palisade_schema::yaml::parse(file, &source.text).ok()?;
    Some(root.value().pos_of(path))
}

/// The bundle's workflow file whose top-level `name` is `trigger`.
fn workflow_file(sources: &[Source], hub: &str, trigger: &str) -> Option<String> {
    sources
        .iter()
        .filter(|s| s.name != hub)
        .find(|s| {
            palisade_schema::yaml::parse(&s.name, &s.text).is_ok_and(|root| {
                matches!(
                    root.value().get("name").map(|n| &n.value),
                    Some(palisade_schema::yaml::Value::String(n)) if n == trigger
                )
            })
        })
        .map(|s| s.name.clone())
}

/// How the checked workflow is laid out, to find where a key is authored.
enum Layout {
    /// One file holds everything.
    File,
    /// `.paseo/hub.yml` (its display name) and one file per workflow.
    Bundle { hub: String },
}

/// The parsed workflow (its display name and model), when it parsed.
type Workflow = Option<(String, palisade_schema::HubConfig, Layout)>;

/// Checks PATH; returns diagnostics (file names as the user sees them),
/// the sources for snippets and the parsed workflow.
fn check_path(path: &Path) -> Result<(Vec<Diagnostic>, Vec<Source>, Checked, Workflow), String> {
    let input = Input::read(path)?;
    let (config, mut diags) = input.parse();
    let (what, files) = match &input {
        Input::File { name, .. } => (name.clone(), 1),
        Input::Bundle { root, files } => (root.join(".paseo").display().to_string(), files.len()),
    };
    let checked = Checked {
        what,
        files,
        counts: counts(config.as_ref()),
    };
    for d in &mut diags {
        d.file = input.display_name(&d.file);
    }
    let layout = match &input {
        Input::File { .. } => Layout::File,
        Input::Bundle { .. } => Layout::Bundle {
            hub: Path::new(&checked.what)
                .join("hub.yml")
                .display()
                .to_string(),
        },
    };
    let workflow = config.map(|c| (checked.what.clone(), c, layout));
    let sources = match input {
        Input::File { name, bytes } => String::from_utf8(bytes)
            .map(|text| vec![Source { name, text }])
            .unwrap_or_default(),
        Input::Bundle { ref files, .. } => files
            .iter()
            .filter_map(|(rel, bytes)| {
                String::from_utf8(bytes.clone()).ok().map(|text| Source {
                    name: input.display_name(rel),
                    text,
                })
            })
            .collect(),
    };
    Ok((diags, sources, checked, workflow))
}

fn human(diags: &[Diagnostic], sources: &[Source], checked: &Checked) -> String {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let renderer = Renderer::new().color(color);
    let mut out = String::new();
    for d in diags {
        let source = sources
            .iter()
            .find(|s| s.name == d.file)
            .map(|s| s.text.as_str());
        out.push_str(&renderer.render(d, source));
        out.push_str("\n\n");
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let scope = match checked.counts {
        Some((triggers, steps)) => format!(
            "{} ({}, {}, {})",
            checked.what,
            plural(checked.files, "file"),
            plural(triggers, "workflow"),
            plural(steps, "step")
        ),
        None => format!("{} ({})", checked.what, plural(checked.files, "file")),
    };
    let verdict = match (errors, warnings) {
        (0, 0) => "no errors, no warnings".to_owned(),
        _ => format!(
            "{}, {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        ),
    };
    out.push_str(&format!("palisade check: {scope}: {verdict}\n"));
    out
}

fn json_report(diags: &[Diagnostic]) -> String {
    let mut s = serde_json::to_string_pretty(&json!({ "diagnostics": diags })).unwrap_or_default();
    s.push('\n');
    s
}

/// SARIF 2.1.0: one run, one rule per code, one result per diagnostic.
pub(crate) fn sarif(diags: &[Diagnostic]) -> String {
    let mut codes: Vec<&str> = diags.iter().map(|d| d.code).collect();
    codes.sort_unstable();
    codes.dedup();
    let rules: Vec<Value> = codes
        .iter()
        .map(|c| {
            json!({
                "id": c,
                "name": c,
                "shortDescription": {"text": c.replace('_', " ")},
                "help": {"text": format!("see docs/check.md, section {c}")},
            })
        })
        .collect();
    let results: Vec<Value> = diags
        .iter()
        .map(|d| {
            let mut region = serde_json::Map::new();
            if d.line > 0 {
                region.insert("startLine".into(), json!(d.line));
                if d.column > 0 {
                    region.insert("startColumn".into(), json!(d.column));
                }
            }
            let mut physical = serde_json::Map::new();
            physical.insert(
                "artifactLocation".into(),
                json!({"uri": d.file.replace('\\', "/")}),
            );
            if !region.is_empty() {
                physical.insert("region".into(), Value::Object(region));
            }
            let mut text = d.message.clone();
            if !d.path.is_root() {
                text = format!("{}: {text}", d.path);
            }
            if let Some(h) = &d.help {
                text = format!("{text} (help: {h})");
            }
            json!({
                "ruleId": d.code,
                "ruleIndex": codes.iter().position(|c| *c == d.code).unwrap_or(0),
                "level": match d.severity { Severity::Error => "error", Severity::Warning => "warning" },
                "message": {"text": text},
                "locations": [{"physicalLocation": Value::Object(physical)}],
                "properties": {"path": d.path.to_string()},
            })
        })
        .collect();
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "palisade",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
