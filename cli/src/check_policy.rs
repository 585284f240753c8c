//! `palisade check --policy palisade.toml`: validate the host policy and
//! print its diagnostics (errors and lints).

use std::path::Path;

use palisade_schema::Diagnostic;
use palisade_schema::host_policy;

use crate::host_policy_file::{read_text, render};

/// Checks the policy at `path`; returns its diagnostics, already printed to
/// stdout in `format` (`human` or `json`).
pub(crate) fn check(path: &Path, json: bool) -> Result<Vec<Diagnostic>, String> {
    let text = read_text(path)?;
    let (_, diags) = host_policy::parse(&text, &path.display().to_string());
    if json {
        for d in &diags {
            println!("{}", serde_json::to_string(d).map_err(|e| e.to_string())?);
        }
    } else {
        print!("{}", render(&diags, &text));
        let errors = diags.iter().filter(|d| d.is_error()).count();
        let warnings = diags.len() - errors;
        println!(
            "{}: {errors} error(s), {warnings} warning(s)",
            path.display()
        );
    }
    Ok(diags)
}
