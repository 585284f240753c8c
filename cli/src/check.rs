//! `palisade check`: validate hub workflows, provider options and lints.
//!
//! Each PATH is a repository root holding `.paseo/`, a `.paseo` folder, a
//! single-file workflow, or `-` for one single-file document on standard
//! input (named `<stdin>`). Output is rustc-style text (default), JSON or
//! SARIF 2.1.0. Exit status: 0 without errors (warnings allowed), 1 with
//! errors (or with warnings under `--deny warnings`), 2 on usage or IO
//! errors. `--allow`, `--warn` and `--deny` re-level lints
//! ([`levels`]); `# palisade: allow(code) reason` comments suppress a
//! lint in their file ([`suppress`]).

mod levels;
mod suppress;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use palisade_schema::render::Renderer;
use palisade_schema::trigger::{Release, TriggerDocument, TriggerOptions};
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
    /// Repository roots (holding `.paseo/`), `.paseo` folders, single-file
    /// workflows or trigger documents, or `-`: one single-file document on
    /// standard input.
    #[arg(default_value = ".", value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Also check this host policy file (`palisade.toml`).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The Paseo Hub release trigger documents are checked against: events
    /// and keys a release does not have are refused, naming the release
    /// that has them.
    #[arg(long, value_enum, default_value = "0.9.0")]
    hub_release: HubRelease,
    /// The Paseo daemon release the agents will run on. When it is newer
    /// than the one palisade's provider option schemas model, an unknown
    /// option key is a warning (unknown_option_newer_daemon), not an error.
    #[arg(long, value_name = "X.Y.Z", value_parser = palisade_schema::options::DaemonVersion::parse)]
    daemon_version: Option<palisade_schema::options::DaemonVersion>,
    /// Preview Paseo Hub 0.9's migration of a v0.6 bundle or workflow:
    /// per trigger `single_run` (with the document) or `legacy_multistep`
    /// (with why), and every authority change it implies.
    #[arg(long)]
    migrate: bool,
    /// Drop this lint's findings (repeatable). Only lints: a schema error
    /// that makes a document invalid cannot be allowed (exit 2).
    #[arg(long, value_name = "CODE")]
    allow: Vec<String>,
    /// Report this lint error as a warning (repeatable; lints only).
    #[arg(long, value_name = "CODE")]
    warn: Vec<String>,
    /// `warnings`: exit 1 when any warning is reported; or a lint CODE to
    /// report as an error (repeatable).
    #[arg(long, value_name = "warnings|CODE")]
    deny: Vec<String>,
}

/// `--hub-release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HubRelease {
    /// Paseo Hub 0.9.0.
    #[value(name = "0.9.0")]
    V0_9_0,
    /// Main after 0.9.0 (adds `schedule.tick`).
    Main,
    /// Unreleased pull requests (adds Forgejo, Linear team filters).
    Unreleased,
}

impl From<HubRelease> for Release {
    fn from(r: HubRelease) -> Self {
        match r {
            HubRelease::V0_9_0 => Self::V0_9_0,
            HubRelease::Main => Self::Main,
            HubRelease::Unreleased => Self::Unreleased,
        }
    }
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
    /// What the summary counts after the files, e.g. `("workflow", 1)`;
    /// empty when a checked configuration did not parse.
    parts: Vec<(&'static str, usize)>,
    /// A note before the file count, e.g. `legacy bundle layout`.
    note: Option<&'static str>,
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn counts(config: Option<&palisade_schema::HubConfig>) -> Vec<(&'static str, usize)> {
    config.map_or_else(Vec::new, |c| {
        let steps = c.triggers.iter().map(|t| t.steps.len()).sum();
        vec![("workflow", c.triggers.len()), ("step", steps)]
    })
}

/// Runs `palisade check`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    if args.migrate {
        let [path] = args.paths.as_slice() else {
            return Err("--migrate previews one PATH".into());
        };
        if path.as_os_str() == "-" {
            return Err("--migrate reads a file or folder, not standard input".into());
        }
        return crate::migrate::run(
            path,
            args.format == Format::Json,
            args.format == Format::Sarif,
        );
    }
    let levels = levels::Levels::new(&args.allow, &args.warn, &args.deny)?;
    if args.paths.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err("`-` (standard input) may be given only once".into());
    }
    // `palisade check --policy FILE` alone checks only the policy when the
    // current folder has no `.paseo`.
    let policy_only = args.policy.is_some()
        && args.paths.len() == 1
        && args.paths.iter().all(|p| p == Path::new("."))
        && !Path::new(".paseo").is_dir();
    let mut diags = Vec::new();
    let mut sources = Vec::new();
    let mut checked = Checked {
        what: String::new(),
        files: 0,
        parts: Vec::new(),
        note: None,
    };
    let mut workflows = Vec::new();
    if !policy_only {
        let target = args.daemon_version.map_or_else(
            palisade_schema::options::OptionsTarget::default,
            palisade_schema::options::OptionsTarget::daemon,
        );
        for path in &args.paths {
            let (d, s, c, config) = check_path(path, args.hub_release.into(), &target)?;
            diags.extend(d);
            sources.extend(s);
            checked.add(c);
            workflows.extend(config);
        }
    }
    if let Some(policy) = &args.policy {
        let text = crate::input::read_text(policy, crate::input::Kind::Policy)?;
        let name = policy.display().to_string();
        diags.extend(check_policy(&name, &text)?);
        for (file, config, layout) in &workflows {
            diags.extend(provider_sandboxes(file, config, layout, &sources));
        }
        checked.add_policy(&name);
        sources.push(Source { name, text });
    }
    diags.retain(|d| !levels.allows(d));
    let mut suppressions = Vec::new();
    for source in &sources {
        let (found, malformed) = suppress::scan(&source.name, &source.text);
        suppressions.extend(found);
        diags.extend(malformed);
    }
    let (reasons, unused) = suppress::apply(&diags, &mut suppressions);
    let mut found: Vec<(Diagnostic, Option<String>)> = diags
        .into_iter()
        .zip(reasons)
        .chain(unused.into_iter().map(|d| (d, None)))
        .collect();
    for (d, _) in &mut found {
        levels.relevel(d);
    }
    found.sort_by(|(a, _), (b, _)| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    let (diags, reasons): (Vec<Diagnostic>, Vec<Option<String>>) = found.into_iter().unzip();
    let out = match args.format {
        Format::Human => human(&diags, &reasons, &sources, &checked),
        Format::Json => json_report(&diags, &reasons),
        Format::Sarif => sarif(&diags, &reasons),
    };
    crate::write_stdout(out.as_bytes())?;
    let failed = diags
        .iter()
        .zip(&reasons)
        .any(|(d, r)| d.is_error() && r.is_none());
    Ok(ExitCode::from(u8::from(failed)))
}

impl Checked {
    /// Adds another checked path to the summary.
    fn add(&mut self, other: Self) {
        if self.what.is_empty() && self.files == 0 {
            *self = other;
            return;
        }
        self.name(&other.what);
        self.files += other.files;
        // Counted only when every checked configuration parsed.
        if other.parts.is_empty() {
            self.parts.clear();
        } else if !self.parts.is_empty() {
            for (word, n) in other.parts {
                match self.parts.iter_mut().find(|(w, _)| *w == word) {
                    Some((_, total)) => *total += n,
                    None => self.parts.push((word, n)),
                }
            }
        }
        if self.note != other.note {
            self.note = None;
        }
    }

    /// Adds the policy file to the summary (it counts no workflows).
    fn add_policy(&mut self, name: &str) {
        self.name(name);
        self.files += 1;
    }

    fn name(&mut self, what: &str) {
        self.what = if self.what.is_empty() {
            what.to_owned()
        } else {
            format!("{} and {what}", self.what)
        };
    }
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

/// What [`check_path`] returns.
type CheckedPath = (Vec<Diagnostic>, Vec<Source>, Checked, Workflow);

/// Checks PATH; returns diagnostics (file names as the user sees them),
/// the sources for snippets and the parsed workflow.
///
/// Layouts: a single file is a trigger document when its top level has
/// `on` and `run` and neither `triggers` nor `steps`, else a single-file
/// workflow. A folder with `.paseo/triggers/` checks the trigger
/// documents; one with only a v0.6 bundle checks the bundle and says it is
/// the legacy layout; one with both checks both and warns
/// (`trigger_workflow_name_clash`) where a trigger and a workflow share a
/// name.
fn check_path(
    path: &Path,
    release: Release,
    target: &palisade_schema::options::OptionsTarget,
) -> Result<CheckedPath, String> {
    let options = TriggerOptions::for_release(release);
    let stdin = path.as_os_str() == "-";
    let is_dir = !stdin
        && std::fs::metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .is_dir();
    if !is_dir {
        let input = if stdin {
            Input::stdin()?
        } else {
            Input::read(path)?
        };
        if let Input::File { name, bytes } = &input
            && let Ok(text) = std::str::from_utf8(bytes)
            && is_trigger_document(text)
        {
            return Ok(check_trigger_file(name, text, &options));
        }
        return check_input(input, target);
    }
    let root = crate::bundle::repo_root(path)?;
    let triggers = crate::bundle::read_triggers(&root)?;
    let legacy = crate::bundle::has_bundle(&root)?;
    let Some(triggers) = triggers else {
        let mut out = check_input(Input::read_bundle(root)?, target)?;
        out.2.note = Some("legacy bundle layout");
        return Ok(out);
    };
    let (mut diags, mut sources, mut checked, docs) = check_trigger_dir(&root, triggers, &options);
    if !legacy {
        return Ok((diags, sources, checked, None));
    }
    let (bundle_diags, bundle_sources, bundle_checked, workflow) =
        check_input(Input::read_bundle(root)?, target)?;
    if let Some((_, config, _)) = &workflow {
        diags.extend(name_clashes(&docs, config, &sources));
    }
    diags.extend(bundle_diags);
    sources.extend(bundle_sources);
    checked.what = format!("{} and {}", checked.what, bundle_checked.what);
    checked.files = checked.files.saturating_add(bundle_checked.files);
    checked.parts.extend(bundle_checked.parts);
    checked.note = Some("trigger documents and a legacy bundle");
    Ok((diags, sources, checked, workflow))
}

/// Whether `text` is a trigger document rather than a v0.6 workflow: a
/// mapping with `on` and `run` (or a `legacy_multistep` export, which the
/// trigger parser refuses with the Hub's messages) and neither `triggers`
/// nor `steps`.
fn is_trigger_document(text: &str) -> bool {
    let Ok(root) = palisade_schema::yaml::parse("", text) else {
        return false;
    };
    let root = root.value();
    let shaped = (root.get("on").is_some() && root.get("run").is_some())
        || root.get("legacy_multistep").is_some();
    shaped && root.get("triggers").is_none() && root.get("steps").is_none()
}

fn trigger_parts(docs: &[TriggerDocument]) -> Vec<(&'static str, usize)> {
    let events = docs.iter().map(|d| d.on.len()).sum();
    vec![("trigger", docs.len()), ("event", events)]
}

/// One trigger document given as a file.
fn check_trigger_file(name: &str, text: &str, options: &TriggerOptions) -> CheckedPath {
    let (doc, diags) = match palisade_schema::trigger::parse_trigger_with(name, text, options) {
        Ok(parsed) => {
            let (doc, warnings) = parsed.into_parts();
            (Some(doc), warnings)
        }
        Err(refused) => (None, refused.into_vec()),
    };
    let checked = Checked {
        what: name.to_owned(),
        files: 1,
        parts: doc
            .as_ref()
            .map_or_else(Vec::new, |d| trigger_parts(std::slice::from_ref(d))),
        note: Some("trigger document"),
    };
    let sources = vec![Source {
        name: name.to_owned(),
        text: text.to_owned(),
    }];
    (diags, sources, checked, None)
}

/// `.paseo/triggers/`, as read by [`crate::bundle::read_triggers`].
fn check_trigger_dir(
    root: &Path,
    triggers: crate::bundle::TriggerFiles,
    options: &TriggerOptions,
) -> (Vec<Diagnostic>, Vec<Source>, Checked, Vec<TriggerDocument>) {
    let display = |rel: &str| {
        if root == Path::new(".") || root.as_os_str().is_empty() {
            rel.to_owned()
        } else {
            root.join(rel).display().to_string()
        }
    };
    let refs: Vec<(&str, &[u8])> = triggers
        .files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let mut diags = triggers.refused;
    let mut docs = Vec::new();
    // Without any entry the parser reports `trigger_missing`; with only
    // refused links that would be noise.
    if !refs.is_empty() || diags.is_empty() {
        match palisade_schema::trigger::parse_trigger_dir(&refs, options) {
            Ok(parsed) => {
                let (d, warnings) = parsed.into_parts();
                docs = d;
                diags.extend(warnings);
            }
            Err(refused) => diags.extend(refused),
        }
    }
    for d in &mut diags {
        d.file = display(&d.file);
    }
    let sources = triggers
        .files
        .iter()
        .filter_map(|(rel, bytes)| {
            String::from_utf8(bytes.clone()).ok().map(|text| Source {
                name: display(rel),
                text,
            })
        })
        .collect();
    let checked = Checked {
        what: display(palisade_schema::trigger::TRIGGER_DIR),
        files: triggers.files.len(),
        parts: trigger_parts(&docs),
        note: None,
    };
    (diags, sources, checked, docs)
}

/// A trigger document and a legacy workflow with one name (the document's,
/// or one of its internal `<name>-event-<n>` triggers): the Hub keeps both,
/// and which one a reader means by the name is ambiguous.
fn name_clashes(
    docs: &[TriggerDocument],
    config: &palisade_schema::HubConfig,
    sources: &[Source],
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for doc in docs {
        for i in 0..doc.on.len() {
            let internal = palisade_schema::trigger::internal_trigger_name(&doc.name, i);
            let Some(w) = config.triggers.iter().find(|t| t.name == internal) else {
                continue;
            };
            let file = sources
                .iter()
                .find(|s| {
                    palisade_schema::yaml::parse(&s.name, &s.text).is_ok_and(|root| {
                        matches!(
                            root.value().get("name").map(|n| &n.value),
                            Some(palisade_schema::yaml::Value::String(n)) if n == &doc.name
                        ) && root.value().get("on").is_some_and(|on| {
                            matches!(on.value, palisade_schema::yaml::Value::Map(_))
                        })
                    })
                })
                .map_or_else(String::new, |s| s.name.clone());
            let at = palisade_schema::diagnostic::Path::root().key("name");
            let mut d = Diagnostic::warning(
                "trigger_workflow_name_clash",
                format!(
                    "trigger document {:?} compiles to trigger {internal:?}, which is also the name of the legacy workflow in {}",
                    doc.name,
                    w.file.as_deref().unwrap_or("the bundle")
                ),
            )
            .with_path(at.clone())
            .with_help("rename one of them, or remove the legacy workflow once the trigger document replaces it");
            if let Some(pos) = position(sources, &file, &at) {
                d = d.at(pos.line, pos.column);
            }
            d.file = file;
            out.push(d);
        }
    }
    out
}

/// Checks a v0.6 workflow input (a single file or a bundle).
fn check_input(
    input: Input,
    target: &palisade_schema::options::OptionsTarget,
) -> Result<CheckedPath, String> {
    let (config, mut diags) = input.parse_for(target);
    let (what, files) = match &input {
        Input::File { name, .. } => (name.clone(), 1),
        Input::Bundle { root, files } => (root.join(".paseo").display().to_string(), files.len()),
    };
    let checked = Checked {
        what,
        files,
        parts: counts(config.as_ref()),
        note: None,
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

/// The text report; a finding with a suppression reason is only counted.
fn human(
    diags: &[Diagnostic],
    reasons: &[Option<String>],
    sources: &[Source],
    checked: &Checked,
) -> String {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let renderer = Renderer::new().color(color);
    let mut out = String::new();
    let suppressed = |i: usize| reasons.get(i).is_some_and(Option::is_some);
    let shown: Vec<&Diagnostic> = diags
        .iter()
        .enumerate()
        .filter(|(i, _)| !suppressed(*i))
        .map(|(_, d)| d)
        .collect();
    let hidden = diags.len() - shown.len();
    let diags = shown;
    for d in &diags {
        let source = sources
            .iter()
            .find(|s| s.name == d.file)
            .map(|s| s.text.as_str());
        out.push_str(&renderer.render(d, source));
        out.push_str("\n\n");
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let mut items: Vec<String> = checked.note.iter().map(|n| (*n).to_owned()).collect();
    items.push(plural(checked.files, "file"));
    items.extend(checked.parts.iter().map(|(word, n)| plural(*n, word)));
    let scope = format!("{} ({})", checked.what, items.join(", "));
    let mut verdict = match (errors, warnings) {
        (0, 0) => "no errors, no warnings".to_owned(),
        _ => format!(
            "{}, {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        ),
    };
    if hidden > 0 {
        verdict.push_str(&format!(", {hidden} suppressed"));
    }
    out.push_str(&format!("palisade check: {scope}: {verdict}\n"));
    out
}

/// `{"diagnostics": [...]}`; a suppressed finding carries
/// `"suppressed": {"reason": …}`.
fn json_report(diags: &[Diagnostic], reasons: &[Option<String>]) -> String {
    let items: Vec<Value> = diags
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
            if let (Some(Some(reason)), Some(m)) = (reasons.get(i), v.as_object_mut()) {
                m.insert("suppressed".into(), json!({ "reason": reason }));
            }
            v
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&json!({ "diagnostics": items })).unwrap_or_default();
    s.push('\n');
    s
}

/// SARIF 2.1.0: one run, one rule per code, one result per diagnostic; a
/// suppressed finding's result carries
/// `suppressions: [{kind: "inSource", justification}]`.
pub(crate) fn sarif(diags: &[Diagnostic], reasons: &[Option<String>]) -> String {
    let mut codes: Vec<&str> = diags.iter().map(|d| d.code).collect();
    codes.sort_unstable();
    codes.dedup();
    let rules: Vec<Value> = codes
        .iter()
        .map(|c| {
            // Every code has a section in docs/check.md whose anchor is the
            // code (`schema/tests/codes.rs` keeps the two in step).
            let uri = palisade_schema::codes::help_uri(c);
            let summary = palisade_schema::codes::summary(c)
                .map_or_else(|| c.replace('_', " "), str::to_owned);
            json!({
                "id": c,
                "name": c,
                "shortDescription": {"text": summary},
                "helpUri": uri,
                "help": {
                    "text": format!("{summary} See {uri}"),
                    "markdown": format!("{summary} [docs/check.md#{c}]({uri})"),
                },
            })
        })
        .collect();
    let results: Vec<Value> = diags
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut region = serde_json::Map::new();
            if d.line > 0 {
                region.insert("startLine".into(), json!(d.line));
                if d.column > 0 {
                    region.insert("startColumn".into(), json!(d.column));
                }
                if d.end_line > 0 {
                    region.insert("endLine".into(), json!(d.end_line));
                    if d.end_column > 0 {
                        region.insert("endColumn".into(), json!(d.end_column));
                    }
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
            let suppressions = match reasons.get(i) {
                Some(Some(reason)) => json!([{"kind": "inSource", "justification": reason}]),
                _ => json!([]),
            };
            json!({
                "ruleId": d.code,
                "suppressions": suppressions,
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
