//! Custom sandbox profiles: a `[profiles.<name>]` table of `palisade.toml`
//! resolved into a `palisade_isolate::Profile`, and the `[worker]` section
//! applied to the sandbox `palisade run --policy` launches.
//!
//! The conversion lives here because `isolate` must not depend on `schema`.
//! It starts from the built-in base and only adds: read-only binds, masks,
//! writable roots, no network, lower limits. It refuses (never clamps) what
//! would weaken the base: a bind at, under or above a built-in host mask
//! (which would show what the mask hides) and a limit above the base's.

use std::path::{Path, PathBuf};

use palisade_isolate::{Limit, NetworkMode, Profile, Sandbox};
use palisade_schema::host_policy::{
    CustomProfile, HostPolicy, ProfileLimits, ProfileNetwork, Worker, WorkerEnv, WorkerLimits,
};

/// The isolate profile named `name`: a built-in one, or a custom one the
/// policy defines. An unknown name is an error naming the defined ones.
pub(crate) fn resolve(policy: &HostPolicy, name: &str) -> Result<Profile, String> {
    if let Some(p) = Profile::by_name(name) {
        return Ok(p);
    }
    match policy.profiles.get(name) {
        Some(c) => convert(name, c),
        None => {
            let mut names: Vec<&str> = Profile::BUILT_IN.to_vec();
            names.extend(policy.profiles.keys().map(String::as_str));
            Err(format!(
                "unknown profile `{name}` (expected one of {})",
                names.join(", ")
            ))
        }
    }
}

/// Whether `a` is `b` or lies under it (component-wise).
fn within(a: &Path, b: &Path) -> bool {
    a.starts_with(b)
}

/// Converts a custom profile into an isolate profile.
/// Every field is named (no `..`), so a new key fails to compile until it
/// is converted here.
pub(crate) fn convert(name: &str, c: &CustomProfile) -> Result<Profile, String> {
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
    } = c;
    let Some(mut p) = Profile::by_name(base.as_str()) else {
        return Err(format!(
            "profile `{name}`: unknown base `{}`",
            base.as_str()
        ));
    };
    p.rename(name)
        .map_err(|e| format!("profile `{name}`: {e}"))?;
    let built_in_masks = p.host_masks().to_vec();
    for (key, paths) in [("read_only", read_only), ("writable", writable)] {
        for text in paths {
            let path = Path::new(text);
            if let Some(m) = built_in_masks
                .iter()
                .find(|m| within(path, m) || within(m, path))
            {
                return Err(format!(
                    "profile `{name}`: {key} `{text}` would uncover the built-in host mask `{}`; a custom profile cannot weaken its base",
                    m.display()
                ));
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
            return Err(format!(
                "profile `{name}`: `network = \"proxy\"` would weaken the `{}` base",
                base.as_str()
            ));
        }
        _ => {}
    }
    for (key, want, which) in [
        ("address_space", address_space, Limit::AddressSpace),
        ("processes", processes, Limit::Processes),
        ("file_size", file_size, Limit::FileSize),
        ("open_files", open_files, Limit::OpenFiles),
        ("cpu", cpu, Limit::CpuSeconds),
    ] {
        let Some(v) = *want else { continue };
        p.limit(which, v).map_err(|e| {
            format!(
                "profile `{name}`: limits.{key} = {v}: {e}; a custom profile can only lower limits"
            )
        })?;
    }
    Ok(p)
}

/// Applies every key of the policy's `[worker]` section to `sb`, the
/// sandbox `palisade run` built from the profile the policy names. Nothing is
/// dropped: the destructuring below names every field (no `..`), so a new
/// key fails to compile until it is applied here, and a key the sandbox
/// cannot honour is an error before anything starts. `policy_path` names
/// the file in messages.
pub(crate) fn apply_worker(sb: &mut Sandbox, w: &Worker, policy_path: &Path) -> Result<(), String> {
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
                pids,
                cpu,
                wall,
                file_size,
            },
    } = w;
    let at = |key: &str| format!("{}: [worker] {key}", policy_path.display());
    // `profile` and `custom_profile`: the sandbox runs the profile they name.
    let named = custom_profile
        .as_deref()
        .unwrap_or_else(|| profile.as_str());
    if named != sb.profile().name() {
        return Err(format!(
            "the policy asks for the `{named}` profile but the sandbox uses `{}`: pass --profile {named}",
            sb.profile().name()
        ));
    }
    for p in writable {
        sb.writable(PathBuf::from(p));
    }
    for p in read_only {
        sb.read_only(PathBuf::from(p));
    }
    for p in masks {
        sb.mask(PathBuf::from(p));
    }
    // The working directory: `palisade run` leaves it to the policy when the
    // policy sets one (and refuses a different --cwd).
    if let Some(c) = cwd {
        sb.cwd(PathBuf::from(c));
    }
    for name in pass {
        sb.pass_env(name)
            .map_err(|e| format!("{} `{name}`: {e}", at("env.pass")))?;
    }
    for (k, v) in set {
        sb.env(k, v);
    }
    if let Some(m) = memory {
        return Err(format!(
            "{} = {m}: the sandbox cannot enforce a memory limit (it needs a delegated cgroup with the memory controller, which palisade does not manage); remove it, or cap each process's address space with `limits.address_space` (RLIMIT_AS) in a `[profiles.<name>]` profile",
            at("limits.memory")
        ));
    }
    for (key, want, which) in [
        ("limits.pids", pids, Limit::Processes),
        ("limits.cpu", cpu, Limit::CpuSeconds),
        ("limits.file_size", file_size, Limit::FileSize),
    ] {
        let Some(v) = *want else { continue };
        sb.limit(which, v)
            .map_err(|e| format!("{} = {v}: {e}", at(key)))?;
    }
    if let Some(secs) = *wall {
        sb.limit_wall(std::time::Duration::from_secs(secs))
            .map_err(|e| format!("{} = {secs}: {e}", at("limits.wall")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

    use super::*;

    fn policy(profile: &str) -> HostPolicy {
        let text = format!("[profiles.ci]\nbase = \"governed\"\n{profile}\n");
        palisade_schema::host_policy::parse("palisade.toml", &text)
            .unwrap()
            .into_value()
    }

    #[test]
    fn custom_profile_converts_onto_its_base() {
        let p = policy(
            "read_only = [\"/opt/tc\"]\nmasks = [\"/etc/ssh\"]\nwritable = [\"/tmp/c\"]\nnetwork = \"none\"\nlimits = { processes = 64, cpu = \"1m\" }",
        );
        let got = resolve(&p, "ci").unwrap();
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
        assert_eq!(got.rlimits().processes, Some(64));
        assert_eq!(got.rlimits().cpu_seconds, Some(60));
        assert_eq!(got.rlimits().open_files, base.rlimits().open_files);
        // Everything else is the base's.
        assert_eq!(got.min_landlock_abi(), base.min_landlock_abi());
        assert_eq!(got.protected_names(), base.protected_names());
        assert_eq!(got.env_allow(), base.env_allow());
        // Built-in names resolve to the built-ins.
        assert_eq!(resolve(&p, "strict").unwrap(), Profile::strict());
    }

    #[test]
    fn conversion_refuses_to_weaken_the_base() {
        // Positive control: a bind beside the masks is accepted.
        assert!(resolve(&policy("read_only = [\"/opt/x\"]"), "ci").is_ok());
        for bad in [
            "read_only = [\"/home/user/.ssh\"]",
            "writable = [\"/var\"]",
            "writable = [\"/\"]",
            "limits = { processes = 1000000 }",
        ] {
            let e = resolve(&policy(bad), "ci").unwrap_err();
            assert!(
                e.contains("cannot weaken") || e.contains("only lower"),
                "{bad}: {e}"
            );
        }
        let e = resolve(&policy(""), "nope").unwrap_err();
        assert!(e.contains("strict, governed, maintenance, ci"), "{e}");
    }

    fn worker(section: &str) -> Worker {
        let text = format!("[worker]\n{section}\n");
        palisade_schema::host_policy::parse("palisade.toml", &text)
            .unwrap()
            .into_value()
            .worker
    }

    #[test]
    fn every_worker_key_reaches_the_sandbox() {
        let w = worker(
            "profile = \"governed\"\ncwd = \"/opt/w\"\nwritable = [\"/opt/w\"]\nread_only = [\"/opt/r\"]\nmasks = [\"/opt/m\"]\nenv = { pass = [\"E2E_PASSED\"], set = { CI = \"1\" } }\nlimits = { pids = 5, cpu = \"1m\", wall = \"2s\", file_size = \"1KiB\" }",
        );
        let mut sb = Sandbox::new(Profile::governed());
        apply_worker(&mut sb, &w, Path::new("palisade.toml")).unwrap();
        let p = sb.profile();
        assert!(p.writable().contains(&PathBuf::from("/opt/w")));
        assert!(p.read_paths().contains(&PathBuf::from("/opt/r")));
        assert!(p.host_masks().contains(&PathBuf::from("/opt/m")));
        assert!(p.env_allow().iter().any(|n| n == "E2E_PASSED"));
        assert_eq!(p.rlimits().processes, Some(5));
        assert_eq!(p.rlimits().cpu_seconds, Some(60));
        assert_eq!(p.rlimits().file_size, Some(1024));
        assert_eq!(p.wall_limit(), Some(std::time::Duration::from_secs(2)));
        assert_eq!(sb.working_dir(), Some(Path::new("/opt/w")));
        assert!(sb.env_vars().iter().any(|(k, v)| k == "CI" && v == "1"));
        // Positive control: an empty section changes nothing of the profile.
        let mut plain = Sandbox::new(Profile::governed());
        apply_worker(&mut plain, &worker(""), Path::new("palisade.toml")).unwrap();
        assert_eq!(plain.profile(), &Profile::governed());
        assert_eq!(plain.working_dir(), None);
    }

    #[test]
    fn worker_keys_the_sandbox_cannot_honour_are_refused() {
        let refuse = |section: &str, want: &str| {
            let mut sb = Sandbox::new(Profile::governed());
            let e = apply_worker(&mut sb, &worker(section), Path::new("p.toml")).unwrap_err();
            assert!(e.contains(want), "{section}: {e}");
            assert!(
                e.contains("p.toml: [worker]") || want.contains("profile"),
                "{e}"
            );
        };
        refuse(
            "limits = { memory = \"1GiB\" }",
            "limits.memory = 1073741824: the sandbox cannot enforce a memory limit",
        );
        refuse(
            "limits = { pids = 5000 }",
            "limits.pids = 5000: profile_weakened: RLIMIT_NPROC = 5000 is above the profile's 4096",
        );
        refuse("limits = { file_size = \"8GiB\" }", "limits.file_size");
        refuse(
            "env = { pass = [\"E2E_API_TOKEN\"] }",
            "env.pass `E2E_API_TOKEN`: profile_weakened: the sandbox never passes",
        );
        refuse(
            "profile = \"strict\"",
            "asks for the `strict` profile but the sandbox uses `governed`",
        );
        // Positive control: the same keys within what the sandbox enforces pass.
        let mut sb = Sandbox::new(Profile::governed());
        apply_worker(
            &mut sb,
            &worker("limits = { pids = 4096, file_size = \"4GiB\" }\nenv = { pass = [\"E2E_API_NAME\"] }"),
            Path::new("p.toml"),
        )
        .unwrap();
    }
}
