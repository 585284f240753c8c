//! Reading hub workflows from disk for `check`, `policy`, `explain` and
//! `run --workflow`: a single-file workflow, or every file of a `.paseo`
//! bundle, with bounded reads and without following links.

use std::fs;
use std::path::{Path, PathBuf};

use palisade_schema::trigger::{TriggerDocument, TriggerOptions};
use palisade_schema::{Diagnostic, HubConfig};

use crate::input::{self, Kind, Links};

/// The name diagnostics give standard input.
pub(crate) const STDIN_NAME: &str = "<stdin>";

/// The most files read from a `.paseo` folder.
const MAX_FILES: usize = 2000;
/// The deepest folder nesting read under `.paseo`.
const MAX_DEPTH: usize = 8;

/// Workflow input as read from disk.
pub(crate) enum Input {
    /// A single-file workflow.
    File {
        /// The path as the user gave it.
        name: String,
        bytes: Vec<u8>,
    },
    /// A bundle: the folder holding `.paseo/` and its files, as
    /// `/`-separated paths relative to that folder, sorted.
    Bundle {
        root: PathBuf,
        files: Vec<(String, Vec<u8>)>,
    },
}

impl Input {
    /// Reads PATH: a repository root holding `.paseo/`, a `.paseo` folder,
    /// or a single-file workflow.
    pub(crate) fn read(path: &Path) -> Result<Self, String> {
        let meta =
            fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if !meta.is_dir() {
            // A single file; anything but a regular one is refused there.
            return Ok(Self::File {
                name: path.display().to_string(),
                bytes: input::read(path, Kind::Workflow)?,
            });
        }
        let root = repo_root(path)?;
        Self::read_bundle(root)
    }

    /// Reads the v0.6 bundle under `root/.paseo` (every file but the
    /// trigger documents of `.paseo/triggers/`, which the Hub's bundle
    /// excludes).
    pub(crate) fn read_bundle(root: PathBuf) -> Result<Self, String> {
        let mut names = Vec::new();
        collect(&root, ".paseo", 0, &mut names)?;
        names.sort();
        let mut files = Vec::with_capacity(names.len());
        let mut total = 0u64;
        for rel in names {
            // Listed without following links; a link swapped in since is
            // refused by the open itself.
            let bytes = input::read_with(&root.join(&rel), Kind::Workflow, Links::Refuse)?;
            total = total.saturating_add(bytes.len() as u64);
            if total > Kind::Bundle.limit() {
                return Err(format!(
                    "input_too_large: {} `{}` is larger than the {} limit for a {} (all its files together)",
                    Kind::Bundle.name(),
                    root.join(".paseo").display(),
                    input::size(Kind::Bundle.limit()),
                    Kind::Bundle.name()
                ));
            }
            files.push((rel, bytes));
        }
        Ok(Self::Bundle { root, files })
    }

    /// Reads one single-file document from standard input, named `<stdin>`
    /// in diagnostics (`palisade check -`), within a workflow file's limit.
    pub(crate) fn stdin() -> Result<Self, String> {
        Ok(Self::File {
            name: STDIN_NAME.to_owned(),
            bytes: input::read_stdin(Kind::Workflow)?,
        })
    }

    /// Parses the input; file names in the diagnostics are relative to the
    /// bundle root (see [`Input::display_name`]).
    /// The model comes only without errors; the diagnostics are every
    /// finding (errors first when there is an error).
    pub(crate) fn parse(&self) -> (Option<HubConfig>, Vec<Diagnostic>) {
        self.parse_for(&palisade_schema::options::OptionsTarget::default())
    }

    /// [`Input::parse`] for agent options that run on `target`'s daemon.
    pub(crate) fn parse_for(
        &self,
        target: &palisade_schema::options::OptionsTarget,
    ) -> (Option<HubConfig>, Vec<Diagnostic>) {
        let result = match self {
            Self::File { name, bytes } => {
                palisade_schema::parse_workflow_bytes_for(name, bytes, target)
            }
            Self::Bundle { files, .. } => {
                let refs: Vec<(&str, &[u8])> = files
                    .iter()
                    .map(|(p, b)| (p.as_str(), b.as_slice()))
                    .collect();
                palisade_schema::parse_bundle_for(&refs, target)
            }
        };
        match result {
            Ok(parsed) => {
                let (config, warnings) = parsed.into_parts();
                (Some(config), warnings)
            }
            Err(refused) => (None, refused.into_vec()),
        }
    }

    /// The name a user sees for a file the parser reported: bundle paths
    /// are joined to the folder the user named.
    pub(crate) fn display_name(&self, file: &str) -> String {
        match self {
            Self::Bundle { root, .. } if root != Path::new(".") && !root.as_os_str().is_empty() => {
                root.join(file).display().to_string()
            }
            _ => file.to_owned(),
        }
    }
}

/// The folder holding `.paseo/` for PATH (a directory): PATH itself, or
/// the parent of a `.paseo` folder.
pub(crate) fn repo_root(path: &Path) -> Result<PathBuf, String> {
    if path.file_name().is_some_and(|n| n == ".paseo") {
        Ok(path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf))
    } else if path.join(".paseo").is_dir() {
        Ok(path.to_path_buf())
    } else {
        Err(format!(
            "{} holds no .paseo folder; give a repository root, a .paseo folder or a workflow file",
            path.display()
        ))
    }
}

/// Whether `root/.paseo` holds anything besides `.paseo/triggers`: the
/// legacy (v0.6) bundle layout.
pub(crate) fn has_bundle(root: &Path) -> Result<bool, String> {
    let dir = root.join(".paseo");
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        if entry.file_name() != "triggers" {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The direct children of `.paseo/triggers/`, read for
/// [`palisade_schema::trigger::parse_trigger_dir`]: regular files with
/// their bytes (bounded reads that refuse links), anything else by path
/// alone (a folder with a trailing `/`), so the parser reports it as
/// `trigger_path_unsupported`. A symlink (`.paseo`, `.paseo/triggers` or
/// an entry) is a `trigger_unsafe_path` finding and is not read.
pub(crate) struct TriggerFiles {
    /// `(path relative to the root, bytes)`, `/`-separated.
    pub(crate) files: Vec<(String, Vec<u8>)>,
    /// The symlink findings.
    pub(crate) refused: Vec<Diagnostic>,
}

/// Reads `root/.paseo/triggers` if it exists (see [`TriggerFiles`]).
pub(crate) fn read_triggers(root: &Path) -> Result<Option<TriggerFiles>, String> {
    use palisade_schema::trigger::TRIGGER_DIR;
    let unsafe_path = |rel: &str| {
        Diagnostic::error("trigger_unsafe_path", format!("{rel} must not use a symlink."))
            .in_file(rel)
            .with_help("the Hub CLI refuses links under .paseo/triggers; replace the link with the file or folder itself")
    };
    let mut refused = Vec::new();
    for rel in [".paseo", TRIGGER_DIR] {
        match fs::symlink_metadata(root.join(rel)) {
            Err(_) => return Ok(None),
            Ok(m) if m.file_type().is_symlink() => {
                refused.push(unsafe_path(rel));
                return Ok(Some(TriggerFiles {
                    files: Vec::new(),
                    refused,
                }));
            }
            Ok(m) if rel == TRIGGER_DIR && !m.is_dir() => {
                return Err(format!(
                    "{} is not a folder (HUB_TRIGGER_DIRECTORY_INVALID)",
                    root.join(rel).display()
                ));
            }
            Ok(_) => {}
        }
    }
    let dir = root.join(TRIGGER_DIR);
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    let mut total = 0u64;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read {}: {e}", entry.path().display()))?;
        let rel = format!("{TRIGGER_DIR}/{}", entry.file_name().to_string_lossy());
        if files.len().saturating_add(refused.len()) >= MAX_FILES {
            return Err(format!(
                "{} holds more than {MAX_FILES} entries",
                dir.display()
            ));
        }
        if kind.is_symlink() {
            refused.push(unsafe_path(&rel));
        } else if kind.is_file() {
            let bytes = input::read_with(&root.join(&rel), Kind::Workflow, Links::Refuse)?;
            total = total.saturating_add(bytes.len() as u64);
            if total > Kind::Bundle.limit() {
                return Err(format!(
                    "input_too_large: `{}` is larger than the {} limit (all its files together)",
                    dir.display(),
                    input::size(Kind::Bundle.limit()),
                ));
            }
            files.push((rel, bytes));
        } else if kind.is_dir() {
            files.push((format!("{rel}/"), Vec::new()));
        } else {
            files.push((rel, Vec::new()));
        }
    }
    Ok(Some(TriggerFiles { files, refused }))
}

/// Loads and parses PATH; any error diagnostic fails the load.
pub(crate) fn load_config(path: &Path) -> Result<HubConfig, String> {
    let input = Input::read(path)?;
    let (config, diags) = input.parse();
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| {
            format!(
                "{}:{}:{}: {}",
                input.display_name(&d.file),
                d.line,
                d.column,
                d.message
            )
        })
        .collect();
    match config {
        Some(c) if errors.is_empty() => Ok(c),
        _ => Err(format!(
            "{} does not parse ({} error(s); run `palisade check`):\n{}",
            path.display(),
            errors.len(),
            errors.join("\n")
        )),
    }
}

/// `/`-separated paths of the files under `root/rel`, without following links.
fn collect(root: &Path, rel: &str, depth: usize, out: &mut Vec<String>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "{} nests deeper than {MAX_DEPTH} folders",
            root.join(rel).display()
        ));
    }
    let dir = root.join(rel);
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read {}: {e}", entry.path().display()))?;
        let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if palisade_schema::trigger::is_trigger_path(&child) {
            // Trigger documents are not part of the v0.6 bundle (the Hub's
            // bundle excludes them); `read_triggers` reads them.
            continue;
        }
        if kind.is_dir() {
            collect(root, &child, depth.saturating_add(1), out)?;
        } else if kind.is_file() {
            if out.len() >= MAX_FILES {
                return Err(format!(
                    "{} holds more than {MAX_FILES} files",
                    root.join(".paseo").display()
                ));
            }
            out.push(child);
        } else {
            return Err(format!(
                "{} is a symbolic link or special file; palisade does not follow links inside .paseo",
                root.join(&child).display()
            ));
        }
    }
    Ok(())
}

/// A configuration as `policy`, `explain` and `run --workflow` load it: a
/// v0.6 workflow or bundle, or Paseo Hub 0.9 trigger documents.
pub(crate) enum Loaded {
    /// A single-file workflow or a `.paseo` bundle.
    Workflow(HubConfig),
    /// The documents of `.paseo/triggers/` (sorted as the Hub CLI reads
    /// them), or one trigger document file.
    Triggers(Vec<TriggerDocument>),
}

/// The folder of trigger documents under a repository root.
const TRIGGERS_DIR: &str = ".paseo/triggers";

/// Loads PATH: a repository root or `.paseo` folder whose `.paseo/triggers/`
/// exists loads those documents (and only them); otherwise the bundle. A
/// single file loads as a workflow, or as a trigger document when it is
/// one (a top-level `run:` key, or a file inside a `triggers` folder).
/// Any error diagnostic fails the load.
pub(crate) fn load(path: &Path) -> Result<Loaded, String> {
    let input = Input::read(path)?;
    // The Hub's verdict only: palisade's lints are `palisade check`'s
    // findings, and `policy`/`explain` must show what the Hub would run.
    let mut options = TriggerOptions::default();
    options.skip_lints = true;
    match &input {
        Input::Bundle { root, .. } if root.join(TRIGGERS_DIR).is_dir() => {
            // The bundle read leaves `.paseo/triggers/` out (the Hub's
            // bundle does): read it as `check` does, links refused.
            let triggers = read_triggers(root)?.ok_or_else(|| {
                format!(
                    "{} changed while it was read",
                    root.join(TRIGGERS_DIR).display()
                )
            })?;
            if !triggers.refused.is_empty() {
                return Err(refusal(path, &input, &triggers.refused));
            }
            let refs: Vec<(&str, &[u8])> = triggers
                .files
                .iter()
                .map(|(p, b)| (p.as_str(), b.as_slice()))
                .collect();
            let result = palisade_schema::trigger::parse_trigger_dir(&refs, &options);
            finish(path, &input, result.map(|p| p.into_parts().0)).map(Loaded::Triggers)
        }
        Input::File { name, bytes } => {
            let (config, diags) = input.parse();
            if let Some(config) = config.filter(|_| !diags.iter().any(Diagnostic::is_error)) {
                return Ok(Loaded::Workflow(config));
            }
            let Ok(text) = std::str::from_utf8(bytes) else {
                return load_config(path).map(Loaded::Workflow);
            };
            let result = palisade_schema::trigger::parse_trigger_with(name, text, &options);
            let looks_like_trigger = text.lines().any(|l| l.starts_with("run:"))
                || path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "triggers");
            match result {
                Ok(parsed) => Ok(Loaded::Triggers(vec![parsed.into_parts().0])),
                Err(refused) if looks_like_trigger => finish(path, &input, Err(refused))
                    .map(|d: TriggerDocument| Loaded::Triggers(vec![d])),
                Err(_) => load_config(path).map(Loaded::Workflow),
            }
        }
        Input::Bundle { .. } => load_config(path).map(Loaded::Workflow),
    }
}

/// The value, or every error of a refused parse as `file:line:col: message`.
fn finish<T>(
    path: &Path,
    input: &Input,
    result: Result<T, palisade_schema::Diagnostics>,
) -> Result<T, String> {
    match result {
        Ok(v) => Ok(v),
        Err(refused) => Err(refusal(path, input, &refused.into_vec())),
    }
}

/// The message of a load refused with `refused` (its errors, located).
fn refusal(path: &Path, input: &Input, refused: &[Diagnostic]) -> String {
    let errors: Vec<String> = refused
        .iter()
        .filter(|d| d.is_error())
        .map(|d| {
            format!(
                "{}:{}:{}: {} [{}]",
                input.display_name(&d.file),
                d.line,
                d.column,
                d.message,
                d.code
            )
        })
        .collect();
    format!(
        "{} does not parse ({} error(s); run `palisade check`):\n{}",
        path.display(),
        errors.len(),
        errors.join("\n")
    )
}
