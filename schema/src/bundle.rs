//! The bundle layout: `.paseo/hub.yml`, `.paseo/workflows/<name>.yml` and
//! prompt partials, with the path rules and size limits of spec §1.1.

use crate::diagnostic::{Diagnostic, Diagnostics, Parsed, Path};
use crate::hub::Walker;
use crate::lazy_path::Lp;
use crate::model::{HubConfig, Partial, PromptBlock};
use crate::semantic::{Checker, ResourceSite, TriggerSite};
use crate::yaml::{Node, Value as Y};

/// The most prompt partials a bundle may hold.
pub const MAX_PARTIALS: usize = 100;
/// The largest partial, in bytes.
pub const MAX_PARTIAL_BYTES: usize = 1_000_000;
/// The largest total size of all partials, in bytes.
pub const MAX_PARTIALS_TOTAL_BYTES: usize = 5_000_000;
/// The longest path inside a bundle, in characters.
pub const MAX_PATH_CHARS: usize = 512;
/// The most workflow files a bundle may hold.
pub const MAX_WORKFLOWS: usize = 1000;

/// The longest project name in `.paseo/hub.yml` (the Hub's
/// `projectSlugSchema`, after trimming white space).
pub const MAX_PROJECT_NAME_CHARS: usize = 100;

/// The path of the hub file inside a bundle.
pub const HUB_FILE: &str = ".paseo/hub.yml";

fn file_error(file: &str, code: &'static str, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(code, message).in_file(file).at(1, 1)
}

/// Decodes a file's bytes as UTF-8, or reports (as one `invalid_utf8`
/// error) where the first invalid byte is.
pub fn decode<'b>(file: &str, bytes: &'b [u8]) -> Result<&'b str, Diagnostics> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => {
            let valid = bytes.get(..e.valid_up_to()).unwrap_or(&[]);
            let text = std::str::from_utf8(valid).unwrap_or("");
            let (line, column) = crate::LineIndex::new(text).line_col(text.len());
            Err(Diagnostics::one(
                Diagnostic::error(
                    "invalid_utf8",
                    format!(
                        "file is not valid UTF-8 (invalid byte at offset {})",
                        e.valid_up_to()
                    ),
                )
                .in_file(file)
                .at(line, column),
            ))
        }
    }
}

enum Kind {
    Hub,
    Workflow,
    Partial,
}

/// Classifies a bundle path, or reports why it is not acceptable.
#[allow(
    clippy::result_large_err,
    reason = "a cold path; the diagnostic is the result"
)]
fn classify(path: &str) -> Result<Option<Kind>, Diagnostic> {
    if path.chars().count() > MAX_PATH_CHARS {
        return Err(file_error(
            path,
            "bundle_path_too_long",
            format!("bundle path longer than {MAX_PATH_CHARS} characters"),
        ));
    }
    if path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(file_error(
            path,
            "unsafe_bundle_path",
            format!("unsafe bundle path {path:?}"),
        ));
    }
    let Some(rest) = path.strip_prefix(".paseo/") else {
        return Err(file_error(
            path,
            "unsafe_bundle_path",
            format!("bundle path {path:?} is outside .paseo/"),
        ));
    };
    if std::path::Path::new(rest)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    {
        return Err(file_error(
            path,
            "toml_not_accepted",
            "TOML is not accepted; use .paseo/hub.yml and workflow .yml files",
        ));
    }
    let segs: Vec<&str> = rest.split('/').collect();
    match segs.as_slice() {
        ["hub.yml"] => Ok(Some(Kind::Hub)),
        ["hub.yaml"] => Err(file_error(
            path,
            "wrong_extension",
            "the hub file must be .paseo/hub.yml (the .yml extension)",
        )),
        ["workflows", name] if name.ends_with(".yml") => Ok(Some(Kind::Workflow)),
        ["workflows", name] if name.ends_with(".yaml") => Err(file_error(
            path,
            "wrong_extension",
            "workflow files must use the .yml extension",
        )),
        // Any depth under partials/ (the Hub's validateBundlePath).
        ["workflows", "partials", .., name] if name.ends_with(".md") => Ok(Some(Kind::Partial)),
        ["workflows", "partials", _, ..] => Err(file_error(
            path,
            "invalid_partial_path",
            "prompt partials must use the .md extension",
        )),
        ["workflows", _, _, ..] => Err(file_error(
            path,
            "nested_workflow_dir",
            "workflow files must be direct children of .paseo/workflows/; nested folders are not read",
        )),
        _ => Err(file_error(
            path,
            "unexpected_bundle_file",
            format!("{path} is outside the canonical Hub bundle layout"),
        )
        .with_help("the Hub refuses a bundle with any file under .paseo/ other than hub.yml, workflows/<name>.yml and workflows/partials/**/*.md; move or delete it")),
    }
}

/// The Hub's `validatePromptPartialPath` (prompt-partials.ts) for an
/// `include:`: percent-decoded (as `decodeURIComponent`, up to 8 times),
/// relative, `\` read as `/`, no empty, `.` or `..` segment, and under
/// `partials/`. Returns the bundle path it names, or why it is refused.
pub(crate) fn include_target(include: &str) -> Result<String, String> {
    let mut decoded = include.to_owned();
    for _ in 0..8 {
        let next = percent_decode(&decoded)
            .ok_or_else(|| format!("path contains invalid encoding: {include}"))?;
        if next == decoded {
            break;
        }
        decoded = next;
    }
    if decoded.contains('\0') {
        return Err(format!("path contains a null byte: {include}"));
    }
    if has_percent_escape(&decoded) {
        return Err(format!("path contains encoded characters: {include}"));
    }
    if decoded.is_empty() {
        return Err("path is empty".to_owned());
    }
    let drive =
        matches!(decoded.as_bytes(), [d, b':', b'/' | b'\\', ..] if d.is_ascii_alphabetic());
    if drive || decoded.starts_with(['/', '\\']) {
        return Err("path must be relative to .paseo/workflows/".to_owned());
    }
    let slashed = decoded.replace('\\', "/");
    if slashed
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!(
            "path must not contain empty, '.' or '..' segments: {include}"
        ));
    }
    let target = format!(".paseo/workflows/{slashed}");
    if !target.starts_with(".paseo/workflows/partials/") {
        return Err("prompt includes must resolve under .paseo/workflows/partials/".to_owned());
    }
    Ok(target)
}

/// Whether `s` holds a `%` followed by two hex digits.
fn has_percent_escape(s: &str) -> bool {
    s.as_bytes()
        .windows(3)
        .any(|w| matches!(w, [b'%', a, b] if a.is_ascii_hexdigit() && b.is_ascii_hexdigit()))
}

/// `decodeURIComponent`: every `%XX` decoded, the bytes read as UTF-8;
/// `None` for a malformed escape or invalid UTF-8 (a `URIError`).
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a bundle given as in-memory files (`(path, bytes)`, paths
/// relative to the repository root, e.g. `.paseo/hub.yml`).
///
/// Returns the model with its warnings when there is no error, else every
/// finding, errors first; findings are sorted by file, line and column.
pub fn parse_bundle(files: &[(&str, &[u8])]) -> Result<Parsed<HubConfig>, Diagnostics> {
    parse_bundle_for(files, &crate::options::OptionsTarget::default())
}

/// [`parse_bundle`] for agent options that will run on `target`'s daemon:
/// an unknown option key of a provider whose schema models an older
/// daemon is the warning `unknown_option_newer_daemon`, not an error (see
/// [`crate::options::OptionsTarget`]).
pub fn parse_bundle_for(
    files: &[(&str, &[u8])],
    target: &crate::options::OptionsTarget,
) -> Result<Parsed<HubConfig>, Diagnostics> {
    let (config, mut diags) = bundle_findings(files, target);
    crate::sort(&mut diags);
    crate::hub_rules::dedup(&mut diags);
    crate::diagnostic::outcome(HUB_FILE, config, diags)
}

fn bundle_findings(
    files: &[(&str, &[u8])],
    target: &crate::options::OptionsTarget,
) -> (Option<HubConfig>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut hub: Option<(&str, &str)> = None;
    let mut workflows: Vec<(&str, &str)> = Vec::new();
    let mut partials: Vec<Partial> = Vec::new();
    let mut partial_total = 0usize;
    for (path, bytes) in files {
        if crate::trigger::is_trigger_path(path) {
            // `.paseo/triggers/*` are trigger documents, not bundle files:
            // the Hub's bundle excludes them (`trigger::parse_trigger_dir`).
            continue;
        }
        let kind = match classify(path) {
            Ok(Some(k)) => k,
            Ok(None) => continue,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        if let Kind::Partial = kind {
            if bytes.len() > MAX_PARTIAL_BYTES {
                diags.push(file_error(
                    path,
                    "partial_too_large",
                    format!(
                        "prompt partial is {} bytes; the limit is {MAX_PARTIAL_BYTES}",
                        bytes.len()
                    ),
                ));
                continue;
            }
            partial_total += bytes.len();
        }
        let text = match decode(path, bytes) {
            Ok(t) => t,
            Err(d) => {
                diags.extend(d);
                continue;
            }
        };
        match kind {
            Kind::Hub => hub = Some((path, text)),
            Kind::Workflow => workflows.push((path, text)),
            Kind::Partial => partials.push(Partial {
                path: (*path).to_owned(),
                text: text.to_owned(),
            }),
        }
    }
    if partials.len() > MAX_PARTIALS {
        diags.push(file_error(
            ".paseo/workflows/partials",
            "too_many_partials",
            format!(
                "{} prompt partials; the limit is {MAX_PARTIALS}",
                partials.len()
            ),
        ));
    }
    if partial_total > MAX_PARTIALS_TOTAL_BYTES {
        diags.push(file_error(".paseo/workflows/partials", "partials_too_large", format!("prompt partials total {partial_total} bytes; the limit is {MAX_PARTIALS_TOTAL_BYTES}")));
    }
    if workflows.len() > MAX_WORKFLOWS {
        diags.push(file_error(
            ".paseo/workflows",
            "too_many_workflows",
            format!(
                "{} workflow files; the limit is {MAX_WORKFLOWS}",
                workflows.len()
            ),
        ));
        workflows.truncate(MAX_WORKFLOWS);
    }
    if workflows.is_empty()
        && !diags
            .iter()
            .any(|d| d.file.starts_with(".paseo/workflows/"))
    {
        diags.push(file_error(
            ".paseo/workflows",
            "missing_workflow",
            "at least one direct .paseo/workflows/<workflow>.yml document is required",
        ));
    }
    workflows.sort_by(|a, b| a.0.cmp(b.0));
    partials.sort_by(|a, b| a.path.cmp(&b.path));

    let Some((hub_path, hub_text)) = hub else {
        if !diags.iter().any(|d| d.file == HUB_FILE) {
            diags.push(file_error(
                HUB_FILE,
                "missing_hub_file",
                "the bundle has no .paseo/hub.yml",
            ));
        }
        return (None, diags);
    };
    let (hub_node, d) = crate::yaml::load(hub_path, hub_text);
    diags.extend(d);
    let mut config = HubConfig {
        name: None,
        environments: Vec::new(),
        agents: Vec::new(),
        triggers: Vec::new(),
        partials,
    };
    let mut env_paths = Vec::new();
    let mut parsed_ok = true;
    if let Some(root) = &hub_node {
        // The Hub walks the configuration it compiles for `timeout`: the
        // environments and the workflows, not hub.yml's name or agents.
        if let Some(envs) = root.get("environments") {
            let p = Path::root().key("environments");
            diags.extend(crate::hub_rules::removed_timeout(hub_path, envs, &p));
        }
        let mut w = Walker {
            file: hub_path.to_owned(),
            diags: &mut diags,
        };
        let before = w.diags.len();
        let _ = hub_file(&mut w, root, &mut config, &mut env_paths);
        // Judged after softening: an unknown option key of a named agent
        // under a newer daemon is a warning and leaves the file well formed.
        crate::options::soften_tree(&mut diags, hub_path, root, target);
        parsed_ok &= !diags
            .get(before..)
            .is_some_and(|d| d.iter().any(Diagnostic::is_error));
    } else {
        parsed_ok = false;
    }
    let mut trees: Vec<(&str, Node)> = Vec::new();
    for (path, text) in &workflows {
        let (node, d) = crate::yaml::load(path, text);
        diags.extend(d);
        let Some(node) = node else {
            parsed_ok = false;
            continue;
        };
        diags.extend(crate::hub_rules::removed_timeout(
            path,
            &node,
            &Path::root(),
        ));
        let mut w = Walker {
            file: (*path).to_owned(),
            diags: &mut diags,
        };
        let parsed = w.trigger(&node, &Lp::Base(&Path::root()), Some(path));
        crate::options::soften_tree(&mut diags, path, &node, target);
        match parsed {
            Some(t) => {
                config.triggers.push(t);
                trees.push((path, node));
            }
            None => parsed_ok = false,
        }
    }
    // Partials: every include must name an existing partial, every partial must be included.
    let mut used = vec![false; config.partials.len()];
    for (t, (file, root)) in config.triggers.iter().zip(&trees) {
        for (i, s) in t.steps.iter().enumerate() {
            for (j, b) in s.prompt.iter().enumerate() {
                let PromptBlock::Include(inc) = b else {
                    continue;
                };
                let p = Path::root()
                    .key("steps")
                    .index(i)
                    .key("prompt")
                    .index(j)
                    .key("include");
                let target = match include_target(inc) {
                    Ok(t) => t,
                    Err(why) => {
                        diags.push(crate::semantic::diag_at(
                            file,
                            root,
                            true,
                            "unsafe_bundle_path",
                            format!("invalid prompt partial {inc:?}: {why}"),
                            &p,
                        ));
                        continue;
                    }
                };
                match config.partials.iter().position(|pt| pt.path == target) {
                    Some(k) => {
                        if let Some(u) = used.get_mut(k) {
                            *u = true;
                        }
                    }
                    None => diags.push(crate::semantic::diag_at(
                        file,
                        root,
                        true,
                        "unknown_partial",
                        format!("include {inc:?} names no partial (looked for {target})"),
                        &p,
                    )),
                }
            }
        }
    }
    if parsed_ok {
        for (pt, u) in config.partials.iter().zip(&used) {
            if !u {
                diags.push(file_error(
                    &pt.path,
                    "unreferenced_partial",
                    format!(
                        "prompt partial {} is not included by any workflow step",
                        pt.path
                    ),
                ));
            }
        }
    }
    if let Some(root) = &hub_node {
        let sites: Vec<TriggerSite<'_>> = trees
            .iter()
            .map(|(f, n)| TriggerSite {
                file: f,
                root: n,
                base: Path::root(),
            })
            .collect();
        let res = ResourceSite {
            file: hub_path,
            root,
            env_paths,
        };
        let mut checker = Checker::new(&config, &diags, hub_path);
        checker.run(&res, &sites);
        diags.extend(checker.diags);
        diags.extend(crate::lints::run(&config, &res, &sites));
    }
    let ok = parsed_ok && !diags.iter().any(Diagnostic::is_error);
    (ok.then_some(config), diags)
}

fn hub_file(
    w: &mut Walker<'_>,
    root: &Node,
    config: &mut HubConfig,
    env_paths: &mut Vec<Path>,
) -> bool {
    let before = w.diags.len();
    let Y::Map(entries) = &root.value else {
        w.error(
            "invalid_type",
            format!(
                "Invalid input: expected object, received {}",
                root.value.type_name()
            ),
            &Lp::Base(&Path::root()),
            root,
        );
        return false;
    };
    for (k, v) in entries {
        let p = Path::root().key(k.text.to_string());
        match k.text.as_ref() {
            "name" => {
                match &v.value {
                    Y::String(s) => match crate::hub_rules::project_name(s) {
                        Ok(name) => config.name = Some(name),
                        Err(why) => w.error("invalid_value", why, &Lp::Base(&p), v),
                    },
                    _ => w.error("invalid_type", format!("Invalid input: expected string, received {}", v.value.type_name()), &Lp::Base(&p), v),
                }
            }
            "environments" => match &v.value {
                Y::Map(envs) if !envs.is_empty() => {
                    let mut list = Vec::new();
                    for (ek, ev) in envs {
                        let ep = p.key(ek.text.to_string());
                        if let Some(e) = w.environment(ev, &Lp::Base(&ep), Some(&ek.text)) {
                            list.push((e, ep));
                        }
                    }
                    list.sort_by(|a, b| a.0.name.cmp(&b.0.name));
                    for (e, ep) in list {
                        config.environments.push(e);
                        env_paths.push(ep);
                    }
                }
                Y::Map(_) => w.error("invalid_value", "environments must not be empty", &Lp::Base(&p), v),
                _ => w.error("invalid_type", format!("Invalid input: expected object (a map of environment name to environment), received {}", v.value.type_name()), &Lp::Base(&p), v),
            },
            "agents" => config.agents = w.named_agents(v, &Lp::Base(&p)),
            "triggers" => w.diags.push(
                Diagnostic::error("monolithic_triggers", "Monolithic triggers are not accepted; move each trigger to .paseo/workflows/<workflow>.yml.")
                    .in_file(w.file.clone())
                    .at(k.pos.line, k.pos.column)
.until(k.end.line, k.end.column)
                    .with_path(p),
            ),
            other => w.diags.push(
                Diagnostic::error("unknown_key", format!("Unrecognized key: {other:?}"))
                    .in_file(w.file.clone())
                    .at(k.pos.line, k.pos.column)
.until(k.end.line, k.end.column)
                    .with_help(format!("unknown project resource {other}; hub.yml holds only name, environments and agents")),
            ),
        }
    }
    if root.get("environments").is_none() {
        w.error(
            "missing_field",
            "missing required key \"environments\"",
            &Lp::Base(&Path::root().key("environments")),
            root,
        );
    }
    !w.diags
        .get(before..)
        .is_some_and(|d| d.iter().any(Diagnostic::is_error))
}
