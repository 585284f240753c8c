//! `palisade check --allow CODE`, `--warn CODE`, `--deny CODE` and
//! `--deny warnings`: the levels a CI run gives the lints.
//!
//! Only lints can be re-levelled: every warning, and the lint errors of
//! [`palisade_schema::LINT_ERRORS`] (plus `provider_sandbox_unavailable`).
//! A schema error that makes a document invalid (an unknown key, a wrong
//! type, a broken reference) can be neither allowed nor turned into a
//! warning: the flag naming it is a usage error (exit 2), so a CI job
//! cannot switch validation off by accident.

use palisade_schema::{Diagnostic, LINT_ERRORS, LINT_WARNINGS, Severity};

/// The codes `check` itself reports about suppression comments; they are
/// not lints and cannot be allowed or suppressed.
pub(crate) const SUPPRESSION_CODES: &[&str] = &[
    "suppression_without_reason",
    "unknown_suppression",
    "unused_suppression",
];

/// Whether `code` names a lint (a code `--allow`, `--warn`, `--deny` and a
/// suppression comment may name).
pub(crate) fn is_lint_code(code: &str) -> bool {
    LINT_WARNINGS.contains(&code) || is_lint_error_code(code)
}

fn is_lint_error_code(code: &str) -> bool {
    LINT_ERRORS.contains(&code) || code == palisade_policy::provider_sandbox::CODE
}

/// Whether this finding is a lint: a warning (other than `check`'s own
/// about suppressions), or an error whose code is a lint error.
pub(crate) fn is_lint(d: &Diagnostic) -> bool {
    if SUPPRESSION_CODES.contains(&d.code) {
        return false;
    }
    !d.is_error() || is_lint_error_code(d.code)
}

/// The levels given on the command line, checked.
#[derive(Debug, Default)]
pub(crate) struct Levels {
    allow: Vec<String>,
    warn: Vec<String>,
    deny: Vec<String>,
    deny_warnings: bool,
}

impl Levels {
    /// Checks the flags: every code must be a lint, and no code may be
    /// given two levels.
    pub(crate) fn new(allow: &[String], warn: &[String], deny: &[String]) -> Result<Self, String> {
        let mut levels = Self::default();
        for (flag, codes) in [("--allow", allow), ("--warn", warn), ("--deny", deny)] {
            for code in codes {
                if flag == "--deny" && code == "warnings" {
                    levels.deny_warnings = true;
                    continue;
                }
                if !is_lint_code(code) {
                    return Err(format!(
                        "{flag} {code}: `{code}` is not a lint code; only lints (warnings and the lint errors {}) can be allowed, warned or denied, never a schema error that makes a document invalid",
                        LINT_ERRORS
                            .iter()
                            .copied()
                            .chain([palisade_policy::provider_sandbox::CODE])
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                let taken = [&levels.allow, &levels.warn, &levels.deny]
                    .iter()
                    .any(|l| l.contains(code));
                if taken {
                    return Err(format!("`{code}` is given more than one level"));
                }
                match flag {
                    "--allow" => levels.allow.push(code.clone()),
                    "--warn" => levels.warn.push(code.clone()),
                    _ => levels.deny.push(code.clone()),
                }
            }
        }
        Ok(levels)
    }

    /// Whether `--allow` drops this finding.
    pub(crate) fn allows(&self, d: &Diagnostic) -> bool {
        is_lint(d) && self.allow.iter().any(|c| c == d.code)
    }

    /// Applies `--warn` and `--deny` to a finding that is reported.
    pub(crate) fn relevel(&self, d: &mut Diagnostic) {
        if !is_lint(d) {
            if self.deny_warnings && !d.is_error() {
                // `check`'s own warnings (an unused suppression) count too.
                d.severity = Severity::Error;
            }
            return;
        }
        if self.warn.iter().any(|c| c == d.code) {
            d.severity = Severity::Warning;
        } else if self.deny_warnings || self.deny.iter().any(|c| c == d.code) {
            d.severity = Severity::Error;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn schema_errors_cannot_be_allowed_but_lints_can() {
        let err = Levels::new(&s(&["unknown_key"]), &[], &[]).unwrap_err();
        assert!(err.contains("not a lint code"), "{err}");
        assert!(Levels::new(&[], &s(&["invalid_type"]), &[]).is_err());
        // Positive controls: a warning and a lint error are allowable.
        let l = Levels::new(&s(&["broad_cwd", "missing_from_users"]), &[], &[]).unwrap();
        assert!(l.allows(&Diagnostic::warning("broad_cwd", "x")));
        assert!(l.allows(&Diagnostic::error("missing_from_users", "x")));
        // `duplicate` is a policy warning and also a schema error: only the
        // warning is a lint.
        let l = Levels::new(&s(&["duplicate"]), &[], &[]).unwrap();
        assert!(l.allows(&Diagnostic::warning("duplicate", "x")));
        assert!(!l.allows(&Diagnostic::error("duplicate", "x")));
        assert!(Levels::new(&s(&["broad_cwd"]), &[], &s(&["broad_cwd"])).is_err());
    }

    #[test]
    fn deny_and_warn_relevel_lints_only() {
        let l = Levels::new(&[], &s(&["missing_from_users"]), &s(&["warnings"])).unwrap();
        let mut d = Diagnostic::error("missing_from_users", "x");
        l.relevel(&mut d);
        assert!(!d.is_error());
        let mut d = Diagnostic::warning("broad_cwd", "x");
        l.relevel(&mut d);
        assert!(d.is_error());
        let l = Levels::new(&[], &[], &[]).unwrap();
        let mut d = Diagnostic::warning("broad_cwd", "x");
        l.relevel(&mut d);
        assert!(!d.is_error());
    }
}
