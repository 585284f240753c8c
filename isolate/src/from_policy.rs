//! The glue from the host policy (`palisade.toml`, parsed by
//! `palisade-schema`) to the sandbox: [`Profile::resolve`] turns a profile
//! name into a [`Profile`] (a built-in one, or a `[profiles.<name>]` table
//! refined from its base), and [`Sandbox::apply_worker`] applies the
//! `[worker]` section. `palisade run` calls exactly these, so the CLI and an
//! embedder cannot drift apart.
//!
//! Both only tighten: a custom profile starts from its built-in base and
//! only adds read-only binds, masks, writable roots, no network and lower
//! limits; `[worker]` only adds binds, masks, variables and lower limits.
//! What would weaken (in a `[profiles.*]` table, a bind that uncovers a
//! built-in mask; anywhere, a raised limit or a credential-like variable)
//! is an error naming the policy key, never clamped or dropped. A `[worker]` bind is the
//! operator's explicit choice of what this worker sees and may lie under a
//! built-in mask (a repository under `/home`): it shows that path and
//! everything below it (a bind of `/home/alice` shows `~/.ssh`), and a mask
//! inside it is refused at spawn (`mask_uncovered`), so name the narrowest
//! path. Both destructure the policy types field by field (no `..`), so
//! a key added to the policy does not compile until it is applied here.
//!
//! The policy types are plain data with public fields, so an embedder can
//! build them by hand: nothing here assumes the parser validated them.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use palisade_schema::host_policy::{
    CustomProfile, HostPolicy, ProfileLimits, ProfileNetwork, Worker, WorkerCommit, WorkerEnv,
    WorkerLimits, Writes,
};

use crate::error::SandboxError;
use crate::layer::Layer;
use crate::profile::{Limit, NetworkMode, Profile};
use crate::spawn::Sandbox;
use crate::stage::{CommitFilter, FilterError};

/// Why [`Profile::resolve`] refused a profile name of the host policy.
///
/// The messages are the ones `palisade run` prints (after the policy file's
/// name); [`ResolveError::code`] is a stable code for each kind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The name is neither built in nor a `[profiles.<name>]` of the policy.
    #[error("unknown profile `{name}` (expected one of {})", known.join(", "))]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The built-in names, then the policy's custom ones.
        known: Vec<String>,
    },
    /// The custom profile's `base` is not a built-in profile of this crate.
    #[error("profile `{profile}`: unknown base `{base}`")]
    UnknownBase {
        /// The custom profile.
        profile: String,
        /// Its `base`.
        base: String,
    },
    /// A custom profile cannot take a built-in name (the launch report
    /// would say `strict` of a profile that is not [`Profile::strict`]).
    #[error("profile `{profile}`: {source}")]
    ReservedName {
        /// The custom profile.
        profile: String,
        /// The refusal of [`Profile::rename`].
        source: SandboxError,
    },
    /// A path of the custom profile is relative or has `.` or `..`
    /// components, so it cannot be checked against the built-in masks.
    #[error(
        "profile `{profile}`: {key} `{path}` must be an absolute path without `.` or `..` components"
    )]
    InvalidPath {
        /// The custom profile.
        profile: String,
        /// The key in the profile table: `read_only`, `writable` or `masks`.
        key: &'static str,
        /// The path as written.
        path: String,
    },
    /// A read-only or writable bind at, under or above a built-in host
    /// mask would show what the mask hides.
    #[error(
        "profile `{profile}`: {key} `{path}` would uncover the built-in host mask `{}`; a custom profile cannot weaken its base",
        mask.display()
    )]
    UncoversMask {
        /// The custom profile.
        profile: String,
        /// The key in the profile table: `read_only` or `writable`.
        key: &'static str,
        /// The path as written.
        path: String,
        /// The built-in mask it would uncover.
        mask: PathBuf,
    },
    /// `network = "proxy"` on a base without network.
    #[error("profile `{profile}`: `network = \"proxy\"` would weaken the `{base}` base")]
    NetworkWeakens {
        /// The custom profile.
        profile: String,
        /// Its `base`.
        base: String,
    },
    /// A limit above the base's (limits are lowered, never raised).
    #[error(
        "profile `{profile}`: limits.{key} = {value}: {source}; a custom profile can only lower limits"
    )]
    LimitRaised {
        /// The custom profile.
        profile: String,
        /// The key in `limits`: `address_space`, `processes`, `file_size`,
        /// `open_files` or `cpu`.
        key: &'static str,
        /// The value asked for, in the limit's unit.
        value: u64,
        /// The refusal of [`Profile::limit`].
        source: SandboxError,
    },
}

impl ResolveError {
    /// A stable code for the kind of refusal: `unknown_profile`,
    /// `unknown_base`, `reserved_name`, `invalid_path`, or `weakens_base`
    /// (a bind uncovering a built-in mask, a network or a limit the base
    /// does not allow: the code `palisade-schema` gives keys that would
    /// weaken a base).
    pub fn code(&self) -> &'static str {
        match self {
            ResolveError::UnknownProfile { .. } => "unknown_profile",
            ResolveError::UnknownBase { .. } => "unknown_base",
            ResolveError::ReservedName { .. } => "reserved_name",
            ResolveError::InvalidPath { .. } => "invalid_path",
            ResolveError::UncoversMask { .. }
            | ResolveError::NetworkWeakens { .. }
            | ResolveError::LimitRaised { .. } => "weakens_base",
        }
    }
}

/// Why [`Sandbox::apply_worker`] refused the policy's `[worker]` section.
/// Each message starts with the policy key it comes from
/// (`worker.limits.pids = 5000: …`); a caller that knows the file prefixes
/// its name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// `worker.profile` names another profile than the sandbox's.
    /// Build the sandbox from [`Profile::resolve`] of
    /// [`Worker::profile_name`].
    #[error("the policy asks for the `{policy}` profile but the sandbox uses `{sandbox}`")]
    ProfileMismatch {
        /// The profile `worker.profile` names.
        policy: String,
        /// The profile the sandbox was built with.
        sandbox: String,
    },
    /// A path of the section is relative or has `.` or `..` components.
    /// The parser refuses those; a hand-built [`Worker`] is refused here,
    /// since such a mask or bind would be resolved against the launcher's
    /// working directory, or not applied at all.
    #[error("worker.{key} `{path}` must be an absolute path without `.` or `..` components")]
    InvalidPath {
        /// The key in `[worker]`: `cwd`, `writable`, `read_only` or `masks`.
        key: &'static str,
        /// The path as written.
        path: String,
    },
    /// A `worker.env.set` name that is not a variable name (empty, or with
    /// `=` or NUL): the worker would get another variable than the one named.
    #[error("worker.env.set `{0}` is not an environment variable name")]
    InvalidEnvName(String),
    /// A `worker.env.pass` name the sandbox never passes (credential-like,
    /// `PATH`, `HOME`, not a variable name).
    #[error("worker.env.pass `{name}`: {source}")]
    EnvPass {
        /// The variable name.
        name: String,
        /// The refusal of [`Profile::pass_env`].
        source: SandboxError,
    },
    /// A limit above the profile's (limits are lowered, never raised).
    #[error("worker.limits.{key} = {value}: {source}")]
    LimitRaised {
        /// The key in `worker.limits`: `pids`, `cpu`, `file_size` or `wall`.
        key: &'static str,
        /// The value asked for, in the policy's unit (a count, bytes or
        /// seconds).
        value: u64,
        /// The refusal of [`Profile::limit`] or [`Profile::limit_wall`].
        source: SandboxError,
    },
    /// A `worker.commit.refuse` pattern the commit filter cannot use.
    #[error("worker.commit.refuse: {0}")]
    CommitPattern(#[source] FilterError),
    /// `worker.writes = "direct"`, but the staged-writes layer could not be
    /// switched off.
    #[error("worker.writes = \"direct\": {0}")]
    WritesDirect(#[source] SandboxError),
}

impl WorkerError {
    /// A stable code for the kind of refusal: `profile_mismatch`,
    /// `invalid_path`, `invalid_name`, or `profile_weakened` (a variable or a limit that would weaken the
    /// profile, as [`SandboxError::Weakens`]).
    pub fn code(&self) -> &'static str {
        match self {
            WorkerError::ProfileMismatch { .. } => "profile_mismatch",
            WorkerError::InvalidPath { .. } => "invalid_path",
            WorkerError::InvalidEnvName(_) => "invalid_name",
            WorkerError::CommitPattern(_) => "invalid_glob",
            WorkerError::WritesDirect(_) => "profile_weakened",
            WorkerError::EnvPass { .. } | WorkerError::LimitRaised { .. } => "profile_weakened",
        }
    }
}

/// Whether `a` is `b` or lies under it (component-wise).
fn within(a: &Path, b: &Path) -> bool {
    a.starts_with(b)
}

/// Whether `path` is absolute with only normal components, so that the
/// component-wise comparisons with the masks mean what they say.
fn plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        // `Path::components` drops interior `.`; the text must not have one.
        && !path
            .to_string_lossy()
            .split('/')
            .any(|s| s == "." || s == "..")
}

impl CommitFilter {
    /// The built-in filter plus `[worker.commit]`'s `refuse` patterns: the
    /// filter `palisade commit` judges a kept stage with, as
    /// [`Sandbox::apply_worker`] sets it for a run.
    ///
    /// ```
    /// use palisade_isolate::stage::CommitFilter;
    /// let policy = palisade_schema::host_policy::parse(
    ///     "palisade.toml",
    ///     "[worker.commit]\nrefuse = [\"deploy/**\"]\n",
    /// )?
    /// .into_value();
    /// let filter = CommitFilter::from_worker(&policy.worker)?;
    /// assert_eq!(filter.patterns(), ["deploy/**"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_worker(w: &Worker) -> Result<CommitFilter, WorkerError> {
        let mut f = CommitFilter::new();
        f.extend_from_worker(w)?;
        Ok(f)
    }

    /// Add `[worker.commit]`'s patterns; on an error `self` is unchanged.
    fn extend_from_worker(&mut self, w: &Worker) -> Result<(), WorkerError> {
        let WorkerCommit { refuse } = &w.commit;
        let mut next = self.clone();
        for glob in refuse {
            next.refuse(glob.as_str())
                .map_err(WorkerError::CommitPattern)?;
        }
        *self = next;
        Ok(())
    }
}

impl Profile {
    /// The profile the host policy names `name`: a built-in one
    /// ([`Profile::BUILT_IN`]), else the policy's `[profiles.<name>]`
    /// refined from its base. An unknown name is an error listing the
    /// defined ones. `palisade run --policy` resolves its profile with
    /// exactly this.
    ///
    /// A custom profile starts from its base's [`Profile`] and only adds:
    /// read-only binds ([`Profile::add_read_only`]), masks, writable roots,
    /// `network = "none"` and lower limits. Every layer, built-in mask,
    /// protected path, the environment allowlist and the minimum Landlock
    /// ABI stay the base's. It refuses, never clamps:
    /// - a `read_only` or `writable` path at, under or above a built-in host
    ///   mask ([`ResolveError::UncoversMask`]), or one that is relative or
    ///   has `.` or `..` components ([`ResolveError::InvalidPath`]);
    /// - `network = "proxy"` on a base without network;
    /// - a limit above the base's ([`ResolveError::LimitRaised`]).
    ///
    /// The limits of `[profiles.<name>.limits]` map one to one:
    ///
    /// | policy key | [`Limit`] | unit |
    /// |---|---|---|
    /// | `limits.address_space` | [`Limit::AddressSpace`] (`RLIMIT_AS`) | bytes |
    /// | `limits.processes` | [`Limit::Processes`] (`RLIMIT_NPROC`) | count |
    /// | `limits.file_size` | [`Limit::FileSize`] (`RLIMIT_FSIZE`) | bytes |
    /// | `limits.open_files` | [`Limit::OpenFiles`] (`RLIMIT_NOFILE`) | count |
    /// | `limits.cpu` | [`Limit::CpuSeconds`] (`RLIMIT_CPU`) | seconds |
    ///
    /// ```
    /// use palisade_isolate::{NetworkMode, Profile};
    /// let text = r#"
    /// [profiles.ci]
    /// base = "governed"
    /// masks = ["/etc/ssh"]
    /// network = "none"
    /// limits = { processes = 64 }
    /// "#;
    /// let policy = palisade_schema::host_policy::parse("palisade.toml", text)
    ///     .unwrap()
    ///     .into_value();
    /// let ci = Profile::resolve(&policy, "ci")?;
    /// assert_eq!(ci.name(), "ci");
    /// assert_eq!(ci.network(), NetworkMode::None);
    /// assert_eq!(ci.rlimits().processes, Some(64));
    /// assert_eq!(Profile::resolve(&policy, "strict")?, Profile::strict());
    /// let e = Profile::resolve(&policy, "nope").unwrap_err();
    /// assert_eq!(e.code(), "unknown_profile");
    /// # Ok::<(), palisade_isolate::ResolveError>(())
    /// ```
    pub fn resolve(policy: &HostPolicy, name: &str) -> Result<Profile, ResolveError> {
        // A table is looked at before the built-in of the same name, so a
        // hand-built `[profiles.governed]` (the parser refuses one) is a
        // `reserved_name` error, never silently dropped with its tightenings.
        if let Some(c) = policy.profiles.get(name) {
            return convert(name, c);
        }
        if let Some(p) = Profile::by_name(name) {
            return Ok(p);
        }
        let mut known: Vec<String> = Profile::BUILT_IN.iter().map(|s| (*s).to_owned()).collect();
        known.extend(policy.profiles.keys().cloned());
        Err(ResolveError::UnknownProfile {
            name: name.to_owned(),
            known,
        })
    }
}

/// Converts a custom profile into an isolate profile.
/// Every field is named (no `..`), so a new key fails to compile until it
/// is converted here.
fn convert(name: &str, c: &CustomProfile) -> Result<Profile, ResolveError> {
    let CustomProfile {
        base,
        read_only,
        masks,
        writable,
        network,
        limits:
            ProfileLimits {
                address_space,
                processes,
                file_size,
                open_files,
                cpu,
            },
        nested_sandbox,
    } = c;
    let profile = || name.to_owned();
    let Some(mut p) = Profile::by_name(base.as_str()) else {
        return Err(ResolveError::UnknownBase {
            profile: profile(),
            base: base.as_str().to_owned(),
        });
    };
    p.rename(name)
        .map_err(|source| ResolveError::ReservedName {
            profile: profile(),
            source,
        })?;
    let built_in_masks = p.host_masks().to_vec();
    for (key, paths) in [
        ("read_only", read_only),
        ("writable", writable),
        ("masks", masks),
    ] {
        for text in paths {
            let path = Path::new(text);
            if !plain_absolute(path) {
                return Err(ResolveError::InvalidPath {
                    profile: profile(),
                    key,
                    path: text.clone(),
                });
            }
            if key == "masks" {
                continue;
            }
            if let Some(m) = built_in_masks
                .iter()
                .find(|m| within(path, m) || within(m, path))
            {
                return Err(ResolveError::UncoversMask {
                    profile: profile(),
                    key,
                    path: text.clone(),
                    mask: m.clone(),
                });
            }
        }
    }
    for r in read_only {
        p.add_read_only(r);
    }
    for w in writable {
        p.add_writable(w);
    }
    for m in masks {
        p.add_mask(m);
    }
    match network {
        Some(ProfileNetwork::None) => {
            p.network_none();
        }
        Some(ProfileNetwork::Proxy) if p.network() == NetworkMode::None => {
            return Err(ResolveError::NetworkWeakens {
                profile: profile(),
                base: base.as_str().to_owned(),
            });
        }
        _ => {}
    }
    // A weakening the operator asked for by name; recorded as a deviation.
    if *nested_sandbox {
        p.allow_nested_sandbox();
    }
    for (key, want, which) in [
        ("address_space", address_space, Limit::AddressSpace),
        ("processes", processes, Limit::Processes),
        ("file_size", file_size, Limit::FileSize),
        ("open_files", open_files, Limit::OpenFiles),
        ("cpu", cpu, Limit::CpuSeconds),
    ] {
        let Some(value) = *want else { continue };
        p.limit(which, value)
            .map_err(|source| ResolveError::LimitRaised {
                profile: profile(),
                key,
                value,
                source,
            })?;
    }
    Ok(p)
}

impl Sandbox {
    /// Applies every key of the host policy's `[worker]` section to this
    /// sandbox, which must have been built from the profile the section
    /// names (see [`Profile::resolve`]). `palisade run --policy` applies its
    /// `[worker]` with exactly this. Nothing is dropped: every field of
    /// [`Worker`] is named here (no `..`), so a key added to the policy does
    /// not compile until it is applied, and a key the sandbox cannot honour
    /// is an error before anything starts. On an error the sandbox is left
    /// as it was.
    ///
    /// The policy's names and units, and what they become:
    ///
    /// | policy key | sandbox | unit |
    /// |---|---|---|
    /// | `worker.profile` | must be [`Sandbox::profile`]'s name, else [`WorkerError::ProfileMismatch`] | name |
    /// | `worker.writable` | [`Sandbox::writable`] | absolute path |
    /// | `worker.read_only` | [`Sandbox::read_only`] | absolute path |
    /// | `worker.masks` | [`Sandbox::mask`] | absolute path |
    /// | `worker.cwd` | [`Sandbox::cwd`] | absolute path |
    /// | `worker.env.pass` | [`Sandbox::pass_env`] | variable name |
    /// | `worker.env.set` | [`Sandbox::env`] | name = value |
    /// | `worker.limits.pids` | [`Limit::Processes`] (`RLIMIT_NPROC`) and the cgroup's `pids.max` ([`Sandbox::limit_cgroup`]) | count |
    /// | `worker.limits.cpu` | [`Limit::CpuSeconds`] (`RLIMIT_CPU`) | seconds |
    /// | `worker.limits.file_size` | [`Limit::FileSize`] (`RLIMIT_FSIZE`) | bytes |
    /// | `worker.limits.wall` | [`Sandbox::limit_wall`] | seconds, as a [`Duration`] |
    /// | `worker.limits.memory` | the cgroup's `memory.max` ([`Sandbox::limit_cgroup`]) | bytes |
    /// | `worker.limits.swap` | the cgroup's `memory.swap.max` | bytes |
    /// | `worker.limits.cpus` | the cgroup's `cpu.max` | thousandths of a CPU |
    ///
    /// Refused, never clamped: a limit above the profile's, a
    /// credential-like, `PATH` or `HOME` name in `env.pass`, a path that is
    /// relative or has `.` or `..` components ([`WorkerError::InvalidPath`])
    /// and an `env.set` name with `=` or NUL (the parser refuses those two
    /// already; a hand-built [`Worker`] is held to the same rules). Checked
    /// at [`Sandbox::spawn`], as for any mask and bind: a mask inside a bind
    /// (`mask_uncovered`), a bind a symlink leads into a mask
    /// (`mask_redirected`), and (with a worker that is host root) a
    /// `pids` limit the kernel would not apply.
    ///
    /// ```
    /// use palisade_isolate::{Profile, Sandbox};
    /// let text = r#"
    /// [worker]
    /// profile = "governed"
    /// cwd = "/srv/repo"
    /// writable = ["/srv/repo"]
    /// masks = ["/etc/ssh"]
    /// limits = { pids = 64, wall = "10m" }
    /// "#;
    /// let policy = palisade_schema::host_policy::parse("palisade.toml", text)
    ///     .unwrap()
    ///     .into_value();
    /// let profile = Profile::resolve(&policy, policy.worker.profile_name())?;
    /// let mut sb = Sandbox::new(profile);
    /// sb.apply_worker(&policy.worker)?;
    /// assert_eq!(sb.profile().rlimits().processes, Some(64));
    /// assert_eq!(sb.profile().wall_limit(), Some(std::time::Duration::from_secs(600)));
    /// assert_eq!(sb.working_dir(), Some(std::path::Path::new("/srv/repo")));
    /// // Ready: `sb.spawn(Command::new(["make", "test"]))` launches the worker.
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_worker(&mut self, w: &Worker) -> Result<&mut Self, WorkerError> {
        let Worker {
            profile,
            custom_profile,
            cwd,
            writable,
            read_only,
            masks,
            env: WorkerEnv { pass, set },
            limits:
                WorkerLimits {
                    memory,
                    swap,
                    pids,
                    cpus,
                    cpu,
                    wall,
                    file_size,
                },
            writes,
            commit: WorkerCommit { refuse: _ },
            // The agent preset is the session's (palisade-cli applies it to
            // the policy before the sandbox sees `[worker]`).
            agent: _,
            agent_state: _,
        } = w;
        // `profile` and `custom_profile`: the sandbox runs the profile they name.
        let named = custom_profile
            .as_deref()
            .unwrap_or_else(|| profile.as_str());
        if named != self.profile.name() {
            return Err(WorkerError::ProfileMismatch {
                policy: named.to_owned(),
                sandbox: self.profile.name().to_owned(),
            });
        }
        for (key, paths) in [
            ("cwd", cwd.as_slice()),
            ("writable", writable.as_slice()),
            ("read_only", read_only.as_slice()),
            ("masks", masks.as_slice()),
        ] {
            if let Some(bad) = paths.iter().find(|p| !plain_absolute(Path::new(p))) {
                return Err(WorkerError::InvalidPath {
                    key,
                    path: bad.clone(),
                });
            }
        }
        if let Some(bad) = set.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
            return Err(WorkerError::InvalidEnvName(bad.clone()));
        }
        // `commit.refuse`: added to the sandbox's filter (the built-in list
        // and whatever was added before stay).
        let mut filter = self.commit_filter().clone();
        filter.extend_from_worker(w)?;
        // Every fallible change is made on a copy, kept only when all pass.
        let mut p = self.profile.clone();
        for path in writable {
            p.add_writable(PathBuf::from(path));
        }
        for path in read_only {
            p.add_read_only(PathBuf::from(path));
        }
        for path in masks {
            p.add_mask(PathBuf::from(path));
        }
        for name in pass {
            p.pass_env(name).map_err(|source| WorkerError::EnvPass {
                name: name.clone(),
                source,
            })?;
        }
        for (key, want, which) in [
            ("pids", pids, Limit::Processes),
            ("cpu", cpu, Limit::CpuSeconds),
            ("file_size", file_size, Limit::FileSize),
        ] {
            let Some(value) = *want else { continue };
            p.limit(which, value)
                .map_err(|source| WorkerError::LimitRaised { key, value, source })?;
        }
        if let Some(secs) = *wall {
            p.limit_wall(Duration::from_secs(secs))
                .map_err(|source| WorkerError::LimitRaised {
                    key: "wall",
                    value: secs,
                    source,
                })?;
        }
        // `writes`: staged is the sandbox's own default; direct is the
        // recorded downgrade, the last fallible step, so a refusal leaves
        // the sandbox as it was.
        match writes {
            Writes::Staged => {}
            Writes::Direct => {
                self.dangerous()
                    .disable(Layer::StagedWrites)
                    .map_err(WorkerError::WritesDirect)?;
            }
        }
        self.profile = p;
        *self.commit_filter_mut() = filter;
        // The cgroup limits: checked (a controller, the values) at spawn,
        // which refuses the launch rather than run without them.
        self.limit_cgroup(crate::cgroup::CgroupLimits {
            memory: *memory,
            swap: *swap,
            pids: *pids,
            cpus: *cpus,
        });
        // The working directory: `palisade run` leaves it to the policy when
        // the policy sets one (and refuses a different --cwd).
        if let Some(c) = cwd {
            self.cwd(PathBuf::from(c));
        }
        for (k, v) in set {
            self.env(k, v);
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

    use super::*;

    /// The one place these tests parse a policy.
    fn parse(text: &str) -> HostPolicy {
        palisade_schema::host_policy::parse("palisade.toml", text)
            .unwrap()
            .into_value()
    }

    fn policy(profile: &str) -> HostPolicy {
        parse(&format!("[profiles.ci]\nbase = \"governed\"\n{profile}\n"))
    }

    #[test]
    fn custom_profile_converts_onto_its_base() {
        let p = policy(
            "read_only = [\"/opt/tc\"]\nmasks = [\"/etc/ssh\"]\nwritable = [\"/tmp/c\"]\nnetwork = \"none\"\nlimits = { processes = 64, cpu = \"1m\", address_space = \"1GiB\", open_files = 100, file_size = \"1MiB\" }",
        );
        let got = Profile::resolve(&p, "ci").unwrap();
        let base = Profile::governed();
        assert_eq!(got.name(), "ci");
        assert_eq!(got.root(), base.root());
        assert_eq!(got.network(), NetworkMode::None);
        assert_eq!(got.read_paths(), vec![PathBuf::from("/opt/tc")]);
        assert_eq!(got.writable(), vec![PathBuf::from("/tmp/c")]);
        // Every built-in mask stays, the custom one is added.
        assert!(
            base.host_masks()
                .iter()
                .all(|m| got.host_masks().contains(m))
        );
        assert!(got.host_masks().contains(&PathBuf::from("/etc/ssh")));
        // Each policy limit lands on its own rlimit, in its own unit.
        assert_eq!(got.rlimits().processes, Some(64));
        assert_eq!(got.rlimits().cpu_seconds, Some(60));
        assert_eq!(got.rlimits().address_space, Some(1 << 30));
        assert_eq!(got.rlimits().open_files, Some(100));
        assert_eq!(got.rlimits().file_size, Some(1 << 20));
        // Everything else is the base's.
        assert_eq!(got.rlimits().core, base.rlimits().core);
        assert_eq!(got.min_landlock_abi(), base.min_landlock_abi());
        assert_eq!(got.protected_names(), base.protected_names());
        assert_eq!(got.env_allow(), base.env_allow());
        assert_eq!(got.deviations(), base.deviations());
        // Built-in names resolve to the built-ins, also when not a base.
        assert_eq!(Profile::resolve(&p, "strict").unwrap(), Profile::strict());
        assert_eq!(
            Profile::resolve(&p, "maintenance").unwrap(),
            Profile::maintenance()
        );
        // A strict base stays strict's root and network.
        let s = Profile::resolve(
            &parse("[profiles.s]\nbase = \"strict\"\nread_only = [\"/opt/tc\"]\n"),
            "s",
        )
        .unwrap();
        assert_eq!(s.root(), Profile::strict().root());
        assert_eq!(s.network(), NetworkMode::None);
    }

    #[test]
    fn a_hand_built_table_with_a_built_in_name_is_refused_not_dropped() {
        // The parser refuses `[profiles.governed]`; a hand-built policy can
        // still hold one, with tightenings that must not vanish silently.
        let mut p = policy("masks = [\"/opt/secret\"]\nnetwork = \"none\"");
        let table = p.profiles.get("ci").cloned().unwrap();
        // Positive control: under its own name the table resolves, tightened.
        let ci = Profile::resolve(&p, "ci").unwrap();
        assert_eq!(ci.network(), NetworkMode::None);
        p.profiles.insert("governed".to_owned(), table);
        let e = Profile::resolve(&p, "governed").unwrap_err();
        assert_eq!(e.code(), "reserved_name", "{e}");
        // Without such a table the built-in resolves as before.
        p.profiles.remove("governed");
        assert_eq!(
            Profile::resolve(&p, "governed").unwrap(),
            Profile::governed()
        );
    }

    #[test]
    fn conversion_refuses_to_weaken_the_base() {
        // Positive control: a bind beside the masks is accepted.
        assert!(Profile::resolve(&policy("read_only = [\"/opt/x\"]"), "ci").is_ok());
        for (bad, code, want) in [
            (
                "read_only = [\"/home/user/.ssh\"]",
                "weakens_base",
                "profile `ci`: read_only `/home/user/.ssh` would uncover the built-in host mask `/home`; a custom profile cannot weaken its base",
            ),
            ("writable = [\"/var\"]", "weakens_base", "cannot weaken"),
            (
                "writable = [\"/\"]",
                "weakens_base",
                "would uncover the built-in host mask `/var`",
            ),
            (
                "limits = { processes = 1000000 }",
                "weakens_base",
                "profile `ci`: limits.processes = 1000000: profile_weakened: RLIMIT_NPROC = 1000000 is above the profile's 4096; a limit can only be lowered; a custom profile can only lower limits",
            ),
            (
                "limits = { open_files = 5000 }",
                "weakens_base",
                "limits.open_files = 5000",
            ),
        ] {
            let e = Profile::resolve(&policy(bad), "ci").unwrap_err();
            assert_eq!(e.code(), code, "{bad}: {e}");
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
        let e = Profile::resolve(&policy(""), "nope").unwrap_err();
        assert_eq!(e.code(), "unknown_profile");
        assert_eq!(
            e.to_string(),
            "unknown profile `nope` (expected one of strict, governed, maintenance, ci)"
        );
    }

    /// The policy types are public data: an embedder may build them by hand,
    /// past the parser's path rules. A path the mask comparison cannot read
    /// literally is refused, not compared (`/opt/../var` is `/var`).
    #[test]
    fn a_hand_built_policy_cannot_slip_a_bind_past_the_mask_check() {
        let hand = |writable: &str| {
            let mut policy = HostPolicy::default();
            policy.profiles.insert(
                "ci".to_owned(),
                CustomProfile {
                    writable: vec![writable.to_owned()],
                    ..CustomProfile::default()
                },
            );
            policy
        };
        // Positive control: a plain path beside the masks is accepted.
        assert!(Profile::resolve(&hand("/opt/cache"), "ci").is_ok());
        for bad in ["/opt/../var", "/opt/./x", "var", "", "/opt/x/.."] {
            let e = Profile::resolve(&hand(bad), "ci").unwrap_err();
            assert_eq!(e.code(), "invalid_path", "{bad}: {e}");
            assert!(
                e.to_string().contains(&format!(
                    "profile `ci`: writable `{bad}` must be an absolute path"
                )),
                "{e}"
            );
        }
        // A custom profile under a built-in name never reaches the report.
        let mut reserved = HostPolicy::default();
        reserved
            .profiles
            .insert("x".to_owned(), CustomProfile::default());
        assert!(Profile::resolve(&reserved, "x").is_ok());
        let e = convert("strict", &CustomProfile::default()).unwrap_err();
        assert_eq!(e.code(), "reserved_name", "{e}");
        // `network = "proxy"` on strict.
        let mut net = HostPolicy::default();
        net.profiles.insert(
            "n".to_owned(),
            CustomProfile {
                base: palisade_schema::host_policy::Profile::Strict,
                network: Some(ProfileNetwork::Proxy),
                ..CustomProfile::default()
            },
        );
        let e = Profile::resolve(&net, "n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "profile `n`: `network = \"proxy\"` would weaken the `strict` base"
        );
    }

    fn worker(section: &str) -> Worker {
        parse(&format!("[worker]\n{section}\n")).worker
    }

    #[test]
    fn cgroup_limits_reach_the_sandbox_and_are_only_lowered() {
        let mut sb = Sandbox::new(Profile::governed());
        assert!(sb.cgroup_limits().is_empty());
        sb.apply_worker(&worker(
            "limits = { memory = \"2GiB\", swap = \"1GiB\", pids = 64, cpus = 1.5 }",
        ))
        .unwrap();
        let l = *sb.cgroup_limits();
        assert_eq!(l.memory, Some(2 << 30));
        assert_eq!(l.swap, Some(1 << 30));
        assert_eq!(l.pids, Some(64));
        assert_eq!(l.cpus, Some(1500));
        // A second section lowers what it names and cannot raise anything.
        sb.apply_worker(&worker("limits = { memory = \"4GiB\", cpus = 0.5 }"))
            .unwrap();
        let l = *sb.cgroup_limits();
        assert_eq!(l.memory, Some(2 << 30));
        assert_eq!(l.cpus, Some(500));
        assert_eq!(l.pids, Some(64));
    }

    #[test]
    fn every_worker_key_reaches_the_sandbox() {
        let w = worker(
            "profile = \"governed\"\ncwd = \"/opt/w\"\nwritable = [\"/opt/w\"]\nread_only = [\"/opt/r\"]\nmasks = [\"/opt/m\"]\nenv = { pass = [\"E2E_PASSED\"], set = { CI = \"1\" } }\nlimits = { pids = 5, cpu = \"1m\", wall = \"2s\", file_size = \"1KiB\" }",
        );
        let mut sb = Sandbox::new(Profile::governed());
        sb.apply_worker(&w).unwrap();
        let p = sb.profile();
        assert!(p.writable().contains(&PathBuf::from("/opt/w")));
        assert!(p.read_paths().contains(&PathBuf::from("/opt/r")));
        assert!(p.host_masks().contains(&PathBuf::from("/opt/m")));
        assert!(p.env_allow().iter().any(|n| n == "E2E_PASSED"));
        assert_eq!(p.rlimits().processes, Some(5));
        assert_eq!(p.rlimits().cpu_seconds, Some(60));
        assert_eq!(p.rlimits().file_size, Some(1024));
        assert_eq!(p.wall_limit(), Some(Duration::from_secs(2)));
        assert_eq!(sb.working_dir(), Some(Path::new("/opt/w")));
        assert!(sb.env_vars().iter().any(|(k, v)| k == "CI" && v == "1"));
        // Positive control: an empty section changes nothing of the profile.
        let mut plain = Sandbox::new(Profile::governed());
        plain.apply_worker(&worker("")).unwrap();
        assert_eq!(plain.profile(), &Profile::governed());
        assert_eq!(plain.working_dir(), None);
        assert!(plain.env_vars().is_empty());
        // A custom profile's name is the one the sandbox must run.
        let policy = parse(
            "[profiles.ci]\nbase = \"governed\"\n[worker]\nprofile = \"ci\"\nlimits = { pids = 7 }\n",
        );
        let mut ci = Sandbox::new(Profile::resolve(&policy, policy.worker.profile_name()).unwrap());
        ci.apply_worker(&policy.worker).unwrap();
        assert_eq!(ci.profile().rlimits().processes, Some(7));
    }

    /// The verdict rule of one created file under `filter`.
    fn commit_rule(filter: &CommitFilter, path: &str) -> Option<&'static str> {
        let set = crate::stage::ChangeSet {
            changes: vec![crate::stage::Change {
                root: 0,
                path: PathBuf::from(path),
                kind: crate::stage::ChangeKind::Created,
                node: crate::stage::Node {
                    kind: crate::stage::NodeKind::File,
                    mode: 0o644,
                    size: 0,
                    link_target: None,
                    file_caps: false,
                },
            }],
            ..crate::stage::ChangeSet::default()
        };
        match filter.check(&set).pop().unwrap() {
            crate::stage::FilterVerdict::Commit => None,
            crate::stage::FilterVerdict::Refuse(r) => Some(r.rule),
        }
    }

    #[test]
    fn commit_refuse_reaches_the_sandbox_filter() {
        let w = worker("[worker.commit]\nrefuse = [\"deploy/**\", \"**/*.pem\"]");
        let mut sb = Sandbox::new(Profile::governed());
        // Positive control: before, the same paths commit.
        assert_eq!(commit_rule(sb.commit_filter(), "deploy/prod.sh"), None);
        assert_eq!(commit_rule(sb.commit_filter(), "a/key.pem"), None);
        sb.apply_worker(&w).unwrap();
        let f = sb.commit_filter();
        assert_eq!(commit_rule(f, "deploy/prod.sh"), Some("policy_refused"));
        assert_eq!(commit_rule(f, "a/key.pem"), Some("policy_refused"));
        assert_eq!(commit_rule(f, "src/deploy.rs"), None);
        // The built-in list stays.
        assert_eq!(
            commit_rule(f, ".git/hooks/pre-commit"),
            Some("git_internal")
        );
        // What `palisade commit` builds from the policy alone is the same.
        let again = CommitFilter::from_worker(&w).unwrap();
        assert_eq!(again.patterns(), f.patterns());
        assert_eq!(commit_rule(&again, "deploy/x"), Some("policy_refused"));
        // Applying a second section adds; nothing is removed.
        sb.apply_worker(&worker("[worker.commit]\nrefuse = [\"vendor\"]"))
            .unwrap();
        assert_eq!(
            sb.commit_filter().patterns(),
            ["deploy/**", "**/*.pem", "vendor"]
        );
    }

    #[test]
    fn a_hand_built_bad_commit_pattern_or_direct_writes_leave_the_sandbox_as_it_was() {
        let mut w = Worker::default();
        w.commit.refuse = vec![palisade_schema::host_policy::PathGlob::parse("ok/**").unwrap()];
        let mut sb = Sandbox::new(Profile::governed());
        sb.apply_worker(&w).unwrap();
        // `PathGlob` accepts an absolute glob (other keys match absolute
        // paths); a commit pattern must be relative, and says so.
        let mut bad = worker("limits = { pids = 9 }");
        bad.commit.refuse = vec![palisade_schema::host_policy::PathGlob::parse("/etc/**").unwrap()];
        let e = sb.apply_worker(&bad).unwrap_err();
        assert_eq!(e.code(), "invalid_glob", "{e}");
        assert!(
            e.to_string()
                .starts_with("worker.commit.refuse: filter_pattern: `/etc/**`"),
            "{e}"
        );
        assert_eq!(sb.commit_filter().patterns(), ["ok/**"]);
        assert_eq!(
            sb.profile().rlimits().processes,
            Profile::governed().rlimits().processes
        );
        assert!(CommitFilter::from_worker(&bad).is_err());
        // A refused section with `writes = "direct"` leaves staged writes on.
        let e = sb
            .apply_worker(&worker("writes = \"direct\"\nlimits = { pids = 5000 }"))
            .unwrap_err();
        assert_eq!(e.code(), "profile_weakened", "{e}");
        assert!(!sb.disabled_layers().contains(&Layer::StagedWrites));
    }

    #[test]
    fn writes_direct_switches_staged_writes_off_as_a_downgrade() {
        let mut sb = Sandbox::new(Profile::governed());
        sb.apply_worker(&worker("writes = \"staged\"")).unwrap();
        assert!(!sb.disabled_layers().contains(&Layer::StagedWrites));
        sb.apply_worker(&worker("")).unwrap();
        assert!(!sb.disabled_layers().contains(&Layer::StagedWrites));
        sb.apply_worker(&worker("writes = \"direct\"")).unwrap();
        assert!(sb.disabled_layers().contains(&Layer::StagedWrites));
    }

    #[test]
    fn worker_keys_the_sandbox_cannot_honour_are_refused() {
        let refuse = |section: &str, code: &str, want: &str| {
            let mut sb = Sandbox::new(Profile::governed());
            sb.mask("/opt/before");
            let before = sb.clone();
            let e = sb.apply_worker(&worker(section)).unwrap_err();
            assert_eq!(e.code(), code, "{section}: {e}");
            assert!(e.to_string().contains(want), "{section}: {e}");
            // Nothing of a refused section is applied.
            assert_eq!(sb.profile(), before.profile(), "{section}");
            assert_eq!(sb.working_dir(), before.working_dir(), "{section}");
            assert_eq!(sb.env_vars(), before.env_vars(), "{section}");
        };
        refuse(
            "limits = { pids = 5000 }",
            "profile_weakened",
            "worker.limits.pids = 5000: profile_weakened: RLIMIT_NPROC = 5000 is above the profile's 4096",
        );
        refuse(
            "limits = { file_size = \"8GiB\" }",
            "profile_weakened",
            "worker.limits.file_size = 8589934592: profile_weakened: RLIMIT_FSIZE",
        );
        refuse(
            "limits = { cpu = \"2h\" }",
            "profile_weakened",
            "worker.limits.cpu = 7200: profile_weakened: RLIMIT_CPU",
        );
        refuse(
            "env = { pass = [\"E2E_API_TOKEN\"] }",
            "profile_weakened",
            "worker.env.pass `E2E_API_TOKEN`: profile_weakened: the sandbox never passes",
        );
        refuse(
            "env = { pass = [\"PATH\"] }",
            "profile_weakened",
            "worker.env.pass `PATH`: profile_weakened: the sandbox sets `PATH` itself",
        );
        refuse(
            "profile = \"strict\"",
            "profile_mismatch",
            "asks for the `strict` profile but the sandbox uses `governed`",
        );
        // A hand-built section is held to the parser's path rules: a
        // relative mask would be resolved against the launcher's directory.
        let hand = |key: &str, path: &str| {
            let mut w = Worker::default();
            match key {
                "cwd" => w.cwd = Some(path.to_owned()),
                "writable" => w.writable = vec![path.to_owned()],
                "read_only" => w.read_only = vec![path.to_owned()],
                _ => w.masks = vec![path.to_owned()],
            }
            let mut sb = Sandbox::new(Profile::governed());
            sb.apply_worker(&w)
                .map(|_| ())
                .map_err(|e| (e.code(), e.to_string()))
        };
        for (key, bad) in [
            ("masks", "opt/m"),
            ("writable", "/opt/../var"),
            ("read_only", "/opt/./r"),
            ("cwd", "work"),
        ] {
            // Positive control: the same key with a plain absolute path applies.
            hand(key, "/opt/x").unwrap();
            let (code, e) = hand(key, bad).unwrap_err();
            assert_eq!(code, "invalid_path", "{key}: {e}");
            assert_eq!(
                e,
                format!(
                    "worker.{key} `{bad}` must be an absolute path without `.` or `..` components"
                )
            );
        }
        // So is an `env.set` name that would set another variable.
        for bad in ["PATH=/opt/evil:", "", "A\0B"] {
            let mut w = Worker::default();
            w.env.set.insert(bad.to_owned(), "v".to_owned());
            let e = Sandbox::new(Profile::governed())
                .apply_worker(&w)
                .map(|_| ())
                .unwrap_err();
            assert_eq!(e.code(), "invalid_name", "{e}");
            assert!(e.to_string().starts_with("worker.env.set `"), "{e}");
        }
        // A refusal late in the section leaves the earlier keys unapplied.
        refuse(
            "cwd = \"/opt/w\"\nwritable = [\"/opt/w\"]\nmasks = [\"/opt/m\"]\nenv = { pass = [\"E2E_OK\"], set = { CI = \"1\" } }\nlimits = { pids = 5, wall = \"2s\", file_size = \"8GiB\" }",
            "profile_weakened",
            "worker.limits.file_size",
        );
        // Positive control: the same keys within what the sandbox enforces pass.
        let mut sb = Sandbox::new(Profile::governed());
        sb.apply_worker(&worker(
            "limits = { pids = 4096, file_size = \"4GiB\", cpu = \"1h\" }\nenv = { pass = [\"E2E_API_NAME\"] }",
        ))
        .unwrap();
        assert!(sb.profile().env_allow().iter().any(|n| n == "E2E_API_NAME"));
        // A wall limit only tightens once the profile has one.
        let mut sb = Sandbox::new(Profile::governed());
        sb.limit_wall(Duration::from_secs(60)).unwrap();
        let e = sb
            .apply_worker(&worker("limits = { wall = \"2m\" }"))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("worker.limits.wall = 120: profile_weakened: wall limit 120 s"),
            "{e}"
        );
        sb.apply_worker(&worker("limits = { wall = \"30s\" }"))
            .unwrap();
        assert_eq!(sb.profile().wall_limit(), Some(Duration::from_secs(30)));
    }
}
