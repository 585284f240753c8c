//! Outward actions: may this session push, post, mail, book or pay in the
//! user's name without asking?
//!
//! Kinds are dotted names: the built-ins `git.push`, `github.post` (with
//! `.comment`, `.issue`, `.pull_request`, `.review`), `mail.send`, `booking`,
//! `payment`, and any custom kind. A rule's kind covers the same kind and
//! every kind below it (`github.post` covers `github.post.review`); `*`
//! covers all. A rule without `target` matches every target. Deny targets
//! match ignoring ASCII case, allow targets case-sensitively. A `:` after
//! the host separates segments in targets and globs alike, so
//! `github.com/acme/app/**` covers the git target
//! `github.com/acme/app:refs/heads/main`.
//!
//! Order of evaluation:
//!
//! 1. an invalid kind is denied;
//! 2. a match in `outward.deny` denies, tainted or not (deny beats allow);
//! 3. a match in `outward.allow` allows a clean session and asks in a tainted
//!    one (a tainted session ignores `outward.allow`);
//! 4. otherwise `outward.default` decides (`ask` unless set to `deny`).
//!
//! Every outward action that runs is irreversible: record it as such
//! (`palisade_taint::Event::Outward`).

use globset::GlobMatcher;
use palisade_schema::host_policy::{
    HostPolicy, OutwardDefault, OutwardKind, OutwardRule, TargetGlob,
};
use palisade_taint::Session;

use crate::verdict::{Decision, Reason, Verdict};

/// An outward action about to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutwardRequest<'a> {
    /// The kind, such as `github.post.comment`.
    pub kind: &'a str,
    /// The target, such as `github.com/acme/app#12` or `ops@acme.example`.
    pub target: &'a str,
}

/// The `[outward]` rules with their target globs compiled.
#[derive(Clone, Debug)]
pub struct OutwardTable {
    default: OutwardDefault,
    allow: Vec<Compiled>,
    deny: Vec<Compiled>,
}

#[derive(Clone, Debug)]
struct Compiled {
    kind: OutwardKind,
    target: Option<GlobMatcher>,
    text: String,
}

/// A target glob did not compile (the schema parser should have refused it).
#[derive(Debug, thiserror::Error)]
#[error("outward target `{glob}` does not compile: {message}")]
#[non_exhaustive]
pub struct OutwardError {
    /// The glob text.
    pub glob: String,
    /// The compiler's message.
    pub message: String,
}

impl OutwardTable {
    /// Compiles the `[outward]` section of `policy`.
    pub fn new(policy: &HostPolicy) -> Result<Self, OutwardError> {
        Ok(Self {
            default: policy.outward.default,
            allow: compile(&policy.outward.allow, false)?,
            deny: compile(&policy.outward.deny, true)?,
        })
    }

    /// Decides `request` for `session`.
    pub fn decide(&self, session: &Session, request: &OutwardRequest<'_>) -> Verdict {
        if request.kind == "*" || OutwardKind::parse(request.kind).is_err() {
            return Verdict::new(
                Decision::Deny,
                Reason::InvalidOutwardKind,
                None,
                format!("`{}` is not a valid outward kind", request.kind),
            );
        }
        let action = format!("`{}` on `{}`", request.kind, request.target);
        if let Some((i, r)) = first(&self.deny, request) {
            return Verdict::new(
                Decision::Deny,
                Reason::OutwardDenied,
                Some(format!("outward.deny[{i}]")),
                format!("{action} matches deny rule {}", r.text),
            );
        }
        if let Some((i, r)) = first(&self.allow, request) {
            return if session.is_tainted() {
                Verdict::new(
                    Decision::Ask,
                    Reason::TaintedAsk,
                    Some(format!("outward.allow[{i}]")),
                    format!(
                        "{action} matches allow rule {} but the session is tainted, so it asks",
                        r.text
                    ),
                )
            } else {
                Verdict::new(
                    Decision::Allow,
                    Reason::Allowed,
                    Some(format!("outward.allow[{i}]")),
                    format!("{action} matches allow rule {}", r.text),
                )
            };
        }
        let (decision, word) = match self.default {
            OutwardDefault::Ask => (Decision::Ask, "ask"),
            OutwardDefault::Deny => (Decision::Deny, "deny"),
        };
        Verdict::new(
            decision,
            Reason::OutwardDefault,
            Some("outward.default".to_owned()),
            format!("no outward rule matches {action}; the default is {word}"),
        )
    }
}

/// Compiles `policy` and decides `request`; a policy that does not compile denies.
pub fn decide(policy: &HostPolicy, session: &Session, request: &OutwardRequest<'_>) -> Verdict {
    match OutwardTable::new(policy) {
        Ok(t) => t.decide(session, request),
        Err(err) => Verdict::new(Decision::Deny, Reason::PolicyInvalid, None, err.to_string()),
    }
}

/// Deny rules compile case-insensitively, allow rules case-sensitively: both
/// err towards asking.
fn compile(rules: &[OutwardRule], case_insensitive: bool) -> Result<Vec<Compiled>, OutwardError> {
    rules
        .iter()
        .map(|r| {
            let target = match &r.target {
                None => None,
                Some(g) => Some(
                    g.compile(case_insensitive)
                        .map_err(|e| OutwardError {
                            glob: g.as_str().to_owned(),
                            message: e.to_string(),
                        })?
                        .compile_matcher(),
                ),
            };
            let text = match &r.target {
                None => format!("`{}` (any target)", r.kind),
                Some(t) => format!("`{}` on `{t}`", r.kind),
            };
            Ok(Compiled {
                kind: r.kind.clone(),
                target,
                text,
            })
        })
        .collect()
}

/// Targets are matched in their [`TargetGlob::comparable`] form (the form the
/// globs were compiled in), so a git target's `:` separates segments.
fn first<'a>(rules: &'a [Compiled], req: &OutwardRequest<'_>) -> Option<(usize, &'a Compiled)> {
    let target = TargetGlob::comparable(req.target);
    rules.iter().enumerate().find(|(_, r)| {
        r.kind.covers(req.kind) && r.target.as_ref().is_none_or(|m| m.is_match(&*target))
    })
}
