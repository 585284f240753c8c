//! Reading hub workflows from disk for `check`, `policy`, `explain` and
//! `run --workflow`: a single-file workflow, or every file of a `.paseo`
//! bundle, with bounded reads and without following links.

use std::fs;
use std::path::{Path, PathBuf};

use palisade_schema::{Diagnostic, HubConfig};

use crate::input::{self, Kind, Links};

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
        let root = if path.file_name().is_some_and(|n| n == ".paseo") {
            path.parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        } else if path.join(".paseo").is_dir() {
            path.to_path_buf()
        } else {
            return Err(format!(
                "{} holds no .paseo folder; give a repository root, a .paseo folder or a workflow file",
                path.display()
            ));
        };
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

    /// Parses the input; file names in the diagnostics are relative to the
    /// bundle root (see [`Input::display_name`]).
    /// The model comes only without errors; the diagnostics are every
    /// finding (errors first when there is an error).
    pub(crate) fn parse(&self) -> (Option<HubConfig>, Vec<Diagnostic>) {
        let result = match self {
            Self::File { name, bytes } => palisade_schema::parse_workflow_bytes(name, bytes),
            Self::Bundle { files, .. } => {
                let refs: Vec<(&str, &[u8])> = files
                    .iter()
                    .map(|(p, b)| (p.as_str(), b.as_slice()))
                    .collect();
                palisade_schema::parse_bundle(&refs)
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
