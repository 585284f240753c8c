//! Agent presets applied by the governed session (`palisade run --agent
//! NAME`, `[worker] agent`): the merged policy ([`palisade_policy::agent::plan`]),
//! the agent's state directory (its HOME: fresh per session or kept per
//! policy), the host-held key of its stable placeholders, its config files
//! rendered at session start, and the files kept read-only inside.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use palisade_isolate::Sandbox;
use palisade_policy::agent::{AgentName, AgentPlan, EnvValue, TemplateValues};
use palisade_schema::host_policy::{AgentState, HostPolicy};

/// Files in every agent HOME that a shell, git, npm or Node reads as config
/// or runs: kept read-only (created empty when absent) so that a worker
/// cannot leave them for the next session or a host tool. A trailing `/`
/// is a directory.
const HOME_PROTECTED: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".inputrc",
    ".gitconfig",
    ".config/git/",
    ".npmrc",
    ".yarnrc",
    ".node_modules/",
    ".node_libraries/",
    ".curlrc",
    ".wgetrc",
    ".netrc",
    ".ssh/",
    ".local/bin/",
];

/// The agent a session runs: `--agent` when the policy names none; the
/// policy's otherwise. A flag naming another agent is a usage error.
pub(crate) fn choose(flag: Option<&str>, policy: &HostPolicy) -> Result<Option<AgentName>, String> {
    let flag = match flag {
        Some(f) => Some(AgentName::from_name(f).ok_or_else(|| {
            let all: Vec<&str> = AgentName::ALL.iter().map(|a| a.as_str()).collect();
            format!(
                "--agent `{f}`: unknown agent (expected one of {})",
                all.join(", ")
            )
        })?),
        None => None,
    };
    match (flag, policy.worker.agent) {
        (Some(f), Some(p)) if f != p => Err(format!(
            "--agent {} differs from the policy's worker.agent = \"{}\"; drop the flag or change the policy",
            f.as_str(),
            p.as_str()
        )),
        (f, p) => Ok(p.or(f)),
    }
}

/// An agent applied to one session.
pub(crate) struct AgentSession {
    /// The preset merged into the policy.
    pub(crate) plan: AgentPlan,
    /// The state directory: the worker's HOME, at the same path inside.
    pub(crate) home: PathBuf,
    /// The host-held key of the stable placeholders (never in the worker's view).
    pub(crate) key: Vec<u8>,
    /// A fresh HOME, removed when the session ends.
    fresh: bool,
    uid: u32,
    gid: u32,
}

impl std::fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSession")
            .field("home", &self.home)
            .field("fresh", &self.fresh)
            .finish_non_exhaustive()
    }
}

/// The launching user's state directory for agents:
/// `$XDG_STATE_HOME/palisade/agents`, else `~/.local/state/palisade/agents`,
/// or `/var/lib/palisade/agents` for root.
fn agents_base() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from)
        && d.is_absolute()
    {
        return Ok(d.join("palisade/agents"));
    }
    if nix::unistd::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/palisade/agents"));
    }
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(h) if h.is_absolute() => Ok(h.join(".local/state/palisade/agents")),
        _ => Err("no state directory for the agent: set XDG_STATE_HOME or HOME".to_owned()),
    }
}

/// Creates `dir` (and its parents) with `mode`, refusing a symlink at it.
fn make_dir(dir: &Path, mode: u32) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The placeholder key of the policy directory `dir`: read, or made (32
/// random bytes, mode 0600) on first use.
fn placeholder_key(dir: &Path) -> Result<Vec<u8>, String> {
    let path = dir.join("placeholder.key");
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() && m.len() == 32 && m.permissions().mode() & 0o077 == 0 => {
            return std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()));
        }
        Ok(_) => {
            return Err(format!(
                "{}: not a 32-byte file of mode 0600; remove it to make a new key (the agents' stable placeholders then change)",
                path.display()
            ));
        }
        Err(_) => {}
    }
    let mut key = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(&key)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(key)
}

impl AgentSession {
    /// Merges `agent`'s preset into `policy` and prepares its state
    /// directory for the worker `uid`/`gid`: persistent (one per canonical
    /// policy path and agent) or fresh (one per session, `id`).
    pub(crate) fn prepare(
        policy: &HostPolicy,
        policy_path: &Path,
        agent: AgentName,
        (uid, gid): (u32, u32),
        id: &str,
    ) -> Result<AgentSession, String> {
        let plan = palisade_policy::agent::plan(policy, agent)
            .map_err(|e| format!("{}: agent `{}`: {e}", policy_path.display(), agent.as_str()))?;
        let canonical = std::fs::canonicalize(policy_path)
            .map_err(|e| format!("{}: {e}", policy_path.display()))?;
        let digest = {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(
                canonical.as_os_str().as_encoded_bytes(),
            ))
        };
        let dir = agents_base()?.join(format!(
            "{}-{}",
            digest.get(..16).unwrap_or(&digest),
            agent.as_str()
        ));
        // Traversable, not listable: the worker reaches its HOME below it,
        // and nothing else (the key is masked as well).
        make_dir(&dir, 0o711)?;
        let key = placeholder_key(&dir)?;
        let fresh = policy.worker.agent_state == AgentState::Fresh;
        let home = if fresh {
            dir.join(format!("fresh-{id}"))
        } else {
            dir.join("home")
        };
        if fresh && std::fs::symlink_metadata(&home).is_ok() {
            return Err(format!("{}: already exists", home.display()));
        }
        make_dir(&home, 0o700)?;
        chown(&home, uid, gid)?;
        Ok(AgentSession {
            plan,
            home,
            key,
            fresh,
            uid,
            gid,
        })
    }

    /// The merged policy.
    pub(crate) fn policy(&self) -> &HostPolicy {
        &self.plan.policy
    }

    /// The agent's name (`opencode`).
    pub(crate) fn name(&self) -> &'static str {
        self.plan.preset.name.as_str()
    }

    /// Project config the agent must be able to write, kept off the host
    /// only by staged writes ([`palisade_policy::agent::AgentPreset::staged_only`]).
    pub(crate) fn staged_only(&self) -> &[&'static str] {
        &self.plan.preset.staged_only
    }

    /// Refuses a HOME inside a writable root (it would be the worker's to
    /// replace from outside its HOME), then binds it writable as a state
    /// directory (no protected names: see `write_files`), sets `HOME`
    /// and the preset's `Home`/`Cwd` variables, masks the agent state
    /// directory (the placeholder key, the other HOMEs),
    /// and keeps the protected names read-only in every writable root.
    pub(crate) fn apply(&self, sb: &mut Sandbox) -> Result<(), String> {
        let home = std::fs::canonicalize(&self.home)
            .map_err(|e| format!("{}: {e}", self.home.display()))?;
        for w in sb.profile().writable() {
            if let Ok(w) = std::fs::canonicalize(w)
                && (home.starts_with(&w) || w.starts_with(&home))
            {
                return Err(format!(
                    "the agent's state directory {} overlaps the writable root {}; set XDG_STATE_HOME elsewhere",
                    home.display(),
                    w.display()
                ));
            }
        }
        let cwd = sb
            .working_dir()
            .map(|c| c.display().to_string())
            .unwrap_or_else(|| home.display().to_string());
        // A state directory, not a project: the working directory's
        // protected names (isolate's built-in ones, the preset's
        // `protected_workdir`) would make `~/.claude` or `~/.pi` read-only
        // and the agent unable to keep its state. What must stay read-only
        // in HOME is protected by path in `write_files` (`HOME_PROTECTED`,
        // the preset's `protected_home` and read-only files).
        sb.writable_state(home.clone());
        sb.env("HOME", &home);
        for (name, value) in &self.plan.env {
            match value {
                EnvValue::Home => {
                    sb.env(name, &home);
                }
                EnvValue::Cwd => {
                    sb.env(name, &cwd);
                }
                _ => {}
            }
        }
        // The whole agent state directory is masked inside (the key, and
        // every other policy's and session's HOME, all the worker uid's and
        // reachable by their digest names); the HOME's own bind shows
        // through. Under `/tmp` it is out of view already: the sandbox's
        // `/tmp` is its own.
        if let Some(base) = home.parent().and_then(Path::parent)
            && !base.starts_with("/tmp")
        {
            sb.mask(base);
        }
        for name in &self.plan.preset.protected_workdir {
            sb.protect_name(name);
        }
        Ok(())
    }

    /// Creates the preset's state directories, renders its files, creates
    /// the protected HOME paths that are absent, and keeps the read-only
    /// ones read-only inside (a read-only bind over each).
    pub(crate) fn write_files(
        &self,
        sb: &mut Sandbox,
        values: &dyn TemplateValues,
    ) -> Result<(), String> {
        let preset = &self.plan.preset;
        for d in &preset.state_dirs {
            let p = self.inside(d)?;
            self.make_parents(&p.join("x"))?;
        }
        for f in &preset.files {
            let text = palisade_policy::agent::render(f, values).map_err(|e| e.to_string())?;
            let p = self.inside(f.path)?;
            self.make_parents(&p)?;
            write_new(&p, text.as_bytes(), if f.read_only { 0o444 } else { 0o600 })?;
            if f.read_only {
                sb.protect(p);
            } else {
                chown(&p, self.uid, self.gid)?;
            }
        }
        let listed = preset
            .protected_home
            .iter()
            .chain(HOME_PROTECTED.iter())
            .copied();
        for rel in listed {
            let p = self.inside(rel.trim_end_matches('/'))?;
            self.make_parents(&p)?;
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                    create_placeholder(&p, rel.ends_with('/'))?;
                }
                Ok(_) => {}
                Err(_) => create_placeholder(&p, rel.ends_with('/'))?,
            }
            sb.protect(p);
        }
        Ok(())
    }

    /// `rel` below HOME: relative, without `.` or `..`.
    fn inside(&self, rel: &str) -> Result<PathBuf, String> {
        let p = Path::new(rel);
        if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!(
                "agent preset path `{rel}` is not a plain relative path"
            ));
        }
        Ok(self.home.join(p))
    }

    /// Creates the directories between HOME and `p` for the worker,
    /// refusing any that is a symlink (a worker's plant in a kept HOME).
    fn make_parents(&self, p: &Path) -> Result<(), String> {
        let rel = p.strip_prefix(&self.home).map_err(|e| e.to_string())?;
        let mut at = self.home.clone();
        let n = rel.components().count();
        for c in rel.components().take(n.saturating_sub(1)) {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(format!(
                        "{}: not a directory (a symlink or file left in the agent's state directory); remove it",
                        at.display()
                    ));
                }
                Err(_) => {
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&at)
                        .map_err(|e| format!("{}: {e}", at.display()))?;
                    chown(&at, self.uid, self.gid)?;
                }
            }
        }
        Ok(())
    }

    /// Removes a fresh HOME (a kept one stays).
    pub(crate) fn finish(&self) {
        if self.fresh {
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }
}

/// A fresh HOME goes with the session whichever way `run` returns (a
/// refusal before the launch included).
impl Drop for AgentSession {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Writes `bytes` to `p` as a new file (what was there, not followed, is
/// removed first).
fn write_new(p: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            return Err(format!(
                "{}: a directory where a file goes; remove it",
                p.display()
            ));
        }
        Ok(_) => std::fs::remove_file(p).map_err(|e| format!("{}: {e}", p.display()))?,
        Err(_) => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// An empty read-only placeholder: a directory or a file.
fn create_placeholder(p: &Path, dir: bool) -> Result<(), String> {
    if dir {
        std::fs::DirBuilder::new()
            .mode(0o555)
            .create(p)
            .map_err(|e| format!("{}: {e}", p.display()))
    } else {
        write_new(p, b"", 0o444)
    }
}

fn chown(p: &Path, uid: u32, gid: u32) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    nix::unistd::chown(
        p,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(|e| format!("chown {}: {e}", p.display()))
}

/// The template values of a session: each relay's loopback URL and
/// placeholder, the HOME and working directory.
pub(crate) struct Values {
    /// `(relay name, base URL, placeholder)`.
    pub(crate) relays: Vec<(String, String, String)>,
    /// HOME inside.
    pub(crate) home: String,
    /// The working directory inside.
    pub(crate) cwd: String,
}

impl TemplateValues for Values {
    fn relay_url(&self, name: &str) -> Option<String> {
        self.relays
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, u, _)| u.clone())
    }
    fn placeholder(&self, name: &str) -> Option<String> {
        self.relays
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, p)| p.clone())
    }
    fn home(&self) -> String {
        self.home.clone()
    }
    fn cwd(&self) -> String {
        self.cwd.clone()
    }
}
