//! Which Paseo daemon the provider option schemas model, and how a check
//! targets a newer one.
//!
//! The option schemas are the daemon's (`providers/<p>/options.ts`), not
//! the Hub's: the Hub compiler passes `agent.options` through and the
//! daemon refuses what its schema does not know. A newer daemon may know
//! keys palisade's shapes do not, so a check that targets a daemon newer
//! than the modelled one reports an unknown option key as a warning
//! (`unknown_option_newer_daemon`) instead of an error; every key the
//! shape knows is still checked as strictly.

use std::fmt;

use super::{CLAUDE, CODEX, OPENCODE, Shape};
use crate::diagnostic::{Diagnostic, Path, PathSegment, Severity};
use crate::yaml::{Node, Value as Y};

/// A Paseo daemon release, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DaemonVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl DaemonVersion {
    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `X.Y.Z` (an optional leading `v`); a pre-release or build
    /// suffix is refused, as its order against the release is not the
    /// check's to guess.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("daemon version {text:?} is not X.Y.Z (such as 0.8.0)");
        let core = text.strip_prefix('v').unwrap_or(text);
        let mut parts = core.split('.');
        let mut next = || -> Result<u32, String> {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse().map_err(|_| bad())
        };
        let v = Self::new(next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(v)
    }
}

impl fmt::Display for DaemonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl std::str::FromStr for DaemonVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

/// The Paseo daemon release the shapes of spec §8 (hub-workflows.md)
/// model. The spec cites the daemon's option schemas by source file, not
/// by release; 0.8.0 is the newest daemon release found
/// (pacstall/pacstall-programs#9377, `paseo-deb` 0.7.2 → 0.8.0), and that
/// its schemas are exactly these is UNCONFIRMED. Raise it with the shapes.
pub const MODELLED_DAEMON: DaemonVersion = DaemonVersion::new(0, 8, 0);

/// A provider's option schema with the daemon release it models.
#[derive(Debug)]
#[non_exhaustive]
pub struct ProviderSchema {
    /// The base provider id (`codex`, `claude`, `opencode`).
    pub provider: &'static str,
    /// The daemon release whose schema [`ProviderSchema::shape`] models.
    pub daemon: DaemonVersion,
    /// The strict shape.
    pub shape: &'static Shape,
}

/// Every provider palisade has a strict option schema for.
pub const PROVIDER_SCHEMAS: &[ProviderSchema] = &[
    ProviderSchema {
        provider: "codex",
        daemon: MODELLED_DAEMON,
        shape: &CODEX,
    },
    ProviderSchema {
        provider: "claude",
        daemon: MODELLED_DAEMON,
        shape: &CLAUDE,
    },
    ProviderSchema {
        provider: "opencode",
        daemon: MODELLED_DAEMON,
        shape: &OPENCODE,
    },
];

/// The schema of a provider, by base provider id (the text before the
/// first `/`).
pub fn provider_schema(provider: &str) -> Option<&'static ProviderSchema> {
    let base = provider.split('/').next().unwrap_or(provider);
    PROVIDER_SCHEMAS.iter().find(|s| s.provider == base)
}

/// The daemon a check targets. The default is each schema's own daemon:
/// every unknown key is an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OptionsTarget {
    /// The daemon release the options will run on; `None` is the modelled
    /// one.
    pub daemon: Option<DaemonVersion>,
}

impl OptionsTarget {
    /// A check for options that will run on `daemon`.
    pub const fn daemon(daemon: DaemonVersion) -> Self {
        Self {
            daemon: Some(daemon),
        }
    }

    /// Whether `schema` is older than the targeted daemon.
    pub fn is_newer_than(&self, schema: &ProviderSchema) -> bool {
        self.daemon.is_some_and(|d| d > schema.daemon)
    }
}

/// The code of an unknown option key under a daemon newer than the schema.
pub const NEWER_DAEMON_CODE: &str = "unknown_option_newer_daemon";

/// Turns `d` (an `unknown_key` error of `schema`'s options) into the
/// warning a newer daemon gets.
pub(crate) fn soften(d: &mut Diagnostic, schema: &ProviderSchema, target: &OptionsTarget) {
    d.severity = Severity::Warning;
    d.code = NEWER_DAEMON_CODE;
    let daemon = target.daemon.unwrap_or(schema.daemon);
    d.help = Some(format!(
        "palisade's {} option schema models Paseo daemon {}; daemon {daemon} may know this key, so it is not refused — check it against that daemon's provider options",
        schema.provider, schema.daemon
    ));
}

/// Where the options object of a diagnostic's path starts: the index of
/// the `options` segment of an `agent` or of `agents.<name>`.
fn options_index(path: &Path) -> Option<usize> {
    let segs = &path.0;
    segs.iter().enumerate().find_map(|(i, s)| {
        let PathSegment::Key(k) = s else {
            return None;
        };
        if k != "options" {
            return None;
        }
        let parent = i.checked_sub(1).and_then(|j| segs.get(j));
        let grand = i.checked_sub(2).and_then(|j| segs.get(j));
        let under_agent = matches!(parent, Some(PathSegment::Key(p)) if p == "agent")
            || matches!(grand, Some(PathSegment::Key(g)) if g == "agents");
        under_agent.then_some(i)
    })
}

/// Whether `d` is an unknown key under an agent's `options` (the finding a
/// newer daemon softens).
pub(crate) fn is_unknown_option_key(d: &Diagnostic) -> bool {
    d.code == "unknown_key" && options_index(&d.path).is_some()
}

/// Softens, for `target`, the unknown option keys that `file`'s tree
/// `root` produced: each one's provider is read from the agent above its
/// `options`.
pub(crate) fn soften_tree(
    diags: &mut [Diagnostic],
    file: &str,
    root: &Node,
    target: &OptionsTarget,
) {
    if target.daemon.is_none() {
        return;
    }
    for d in diags.iter_mut() {
        if !d.is_error() || !is_unknown_option_key(d) || d.file != file {
            continue;
        }
        let Some(i) = options_index(&d.path) else {
            continue;
        };
        let agent = Path(d.path.0.iter().take(i).cloned().collect());
        let provider = root
            .at_path(&agent)
            .and_then(|a| a.get("provider"))
            .and_then(|p| match &p.value {
                Y::String(s) => Some(s.to_string()),
                _ => None,
            });
        if let Some(schema) = provider.as_deref().and_then(provider_schema)
            && target.is_newer_than(schema)
        {
            soften(d, schema, target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order_numerically() {
        let v = DaemonVersion::parse("0.10.2").unwrap();
        assert_eq!(v, DaemonVersion::new(0, 10, 2));
        assert_eq!(DaemonVersion::parse("v1.2.3").unwrap().to_string(), "1.2.3");
        assert!(DaemonVersion::new(0, 10, 0) > DaemonVersion::new(0, 9, 9));
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "1.x.3",
            "1.2.3-beta.1",
            "-1.2.3",
            "1..3",
            "9999999999.0.0",
        ] {
            assert!(DaemonVersion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_provider_carries_its_daemon() {
        for p in super::super::PROVIDERS {
            let s = provider_schema(p).unwrap();
            assert_eq!(s.daemon, MODELLED_DAEMON);
        }
        assert_eq!(provider_schema("codex/gpt").unwrap().provider, "codex");
        assert!(provider_schema("gemini").is_none());
        let schema = provider_schema("codex").unwrap();
        assert!(!OptionsTarget::default().is_newer_than(schema));
        assert!(!OptionsTarget::daemon(MODELLED_DAEMON).is_newer_than(schema));
        assert!(OptionsTarget::daemon(DaemonVersion::new(0, 8, 1)).is_newer_than(schema));
    }
}
