//! `palisade check --migrate`: what Paseo Hub 0.9's startup migration makes
//! of a v0.6 bundle or workflow, per trigger, and every authority change it
//! implies (`palisade_policy::migrate`). Exit status: 0 when nothing
//! widens, 1 when some change widens authority (an unlimited reply, a
//! wildcard principal, a grant that becomes effective), 2 on usage errors.

use std::path::Path;
use std::process::ExitCode;

use palisade_policy::migrate::{Format, Migration, migrate};
use serde_json::{Value, json};

use crate::bundle::{Loaded, load};

/// Prints the migration preview of PATH.
pub(crate) fn run(path: &Path, json_out: bool, sarif: bool) -> Result<ExitCode, String> {
    if sarif {
        return Err("--migrate prints human text or JSON, not SARIF".into());
    }
    let config = match load(path)? {
        Loaded::Workflow(c) => c,
        Loaded::Triggers(_) => {
            return Err(format!(
                "{} holds trigger documents (.paseo/triggers/) already; --migrate previews a v0.6 bundle or workflow",
                path.display()
            ));
        }
    };
    let migrations = migrate(&config);
    let widens = migrations
        .iter()
        .any(|m| m.changes.iter().any(|c| c.widens));
    let out = if json_out {
        let doc = json!({
            "migrations": migrations.iter().map(Migration::to_json).collect::<Vec<Value>>(),
            "widens": widens,
        });
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
    } else {
        human(&migrations)
    };
    println!("{out}");
    Ok(ExitCode::from(u8::from(widens)))
}

fn human(migrations: &[Migration]) -> String {
    let mut out = String::new();
    for m in migrations {
        out += &format!("trigger {} (on {}): {}\n", m.trigger, m.on, m.format.name());
        match &m.format {
            Format::LegacyMultistep { blockers } => {
                for b in blockers {
                    out += &format!("  blocked: {b}\n");
                }
            }
            Format::SingleRun { yaml, .. } => {
                out += "  migrated document:\n";
                for line in yaml.lines() {
                    out += &format!("    {line}\n");
                }
            }
            _ => {}
        }
        out += "  authority changes:\n";
        for c in &m.changes {
            let mark = if c.widens { "widens" } else { "note" };
            out += &format!("    {mark} [{}]: {}\n", c.code, c.message);
        }
        out += "\n";
    }
    let widening = migrations
        .iter()
        .flat_map(|m| &m.changes)
        .filter(|c| c.widens)
        .count();
    out += &format!(
        "{} trigger(s): {} single_run, {} legacy_multistep; {widening} change(s) widen authority",
        migrations.len(),
        migrations
            .iter()
            .filter(|m| matches!(m.format, Format::SingleRun { .. }))
            .count(),
        migrations
            .iter()
            .filter(|m| matches!(m.format, Format::LegacyMultistep { .. }))
            .count(),
    );
    out
}
