//! Custom sandbox profiles: a `[profiles.<name>]` table of `palisade.toml`
//! resolved into a `palisade_isolate::Profile`.
//!
//! The conversion lives here because `isolate` must not depend on `schema`.
//! It starts from the built-in base and only adds: read-only binds, masks,
//! writable roots, no network, lower limits. It refuses (never clamps) what
//! would weaken the base: a bind at, under or above a built-in host mask
//! (which would show what the mask hides) and a limit above the base's.

use std::path::{Path, PathBuf};

use palisade_isolate::{NetworkMode, Profile};
use palisade_schema::host_policy::{CustomProfile, HostPolicy, ProfileNetwork};

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
pub(crate) fn convert(name: &str, c: &CustomProfile) -> Result<Profile, String> {
    let Some(mut p) = Profile::by_name(c.base.as_str()) else {
        return Err(format!(
            "profile `{name}`: unknown base `{}`",
            c.base.as_str()
        ));
    };
    p.name = name.to_owned();
    let built_in_masks = p.host_masks.clone();
    for (key, paths) in [("read_only", &c.read_only), ("writable", &c.writable)] {
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
    p.read_paths.extend(c.read_only.iter().map(PathBuf::from));
    p.writable.extend(c.writable.iter().map(PathBuf::from));
    p.host_masks.extend(c.masks.iter().map(PathBuf::from));
    match c.network {
        Some(ProfileNetwork::None) => p.network = NetworkMode::None,
        Some(ProfileNetwork::Proxy) if p.network == NetworkMode::None => {
            return Err(format!(
                "profile `{name}`: `network = \"proxy\"` would weaken the `{}` base",
                c.base.as_str()
            ));
        }
        _ => {}
    }
    let l = &c.limits;
    let r = &mut p.rlimits;
    for (key, want, have) in [
        ("address_space", l.address_space, &mut r.address_space),
        ("processes", l.processes, &mut r.processes),
        ("file_size", l.file_size, &mut r.file_size),
        ("open_files", l.open_files, &mut r.open_files),
        ("cpu", l.cpu, &mut r.cpu_seconds),
    ] {
        let Some(v) = want else { continue };
        if let Some(base) = *have
            && v > base
        {
            return Err(format!(
                "profile `{name}`: limits.{key} = {v} is above the base's {base}; a custom profile can only lower limits"
            ));
        }
        *have = Some(v);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

    use super::*;

    fn policy(profile: &str) -> HostPolicy {
        let text = format!("[profiles.ci]\nbase = \"governed\"\n{profile}\n");
        palisade_schema::host_policy::parse_strict(&text, "palisade.toml")
            .unwrap()
            .0
    }

    #[test]
    fn custom_profile_converts_onto_its_base() {
        let p = policy(
            "read_only = [\"/opt/tc\"]\nmasks = [\"/etc/ssh\"]\nwritable = [\"/tmp/c\"]\nnetwork = \"none\"\nlimits = { processes = 64, cpu = \"1m\" }",
        );
        let got = resolve(&p, "ci").unwrap();
        let base = Profile::governed();
        assert_eq!(got.name, "ci");
        assert_eq!(got.root, base.root);
        assert_eq!(got.network, NetworkMode::None);
        assert_eq!(got.read_paths, vec![PathBuf::from("/opt/tc")]);
        assert_eq!(got.writable, vec![PathBuf::from("/tmp/c")]);
        // Every built-in mask stays, the custom one is added.
        assert!(base.host_masks.iter().all(|m| got.host_masks.contains(m)));
        assert!(got.host_masks.contains(&PathBuf::from("/etc/ssh")));
        assert_eq!(got.rlimits.processes, Some(64));
        assert_eq!(got.rlimits.cpu_seconds, Some(60));
        assert_eq!(got.rlimits.open_files, base.rlimits.open_files);
        // Everything else is the base's.
        assert_eq!(got.min_landlock_abi, base.min_landlock_abi);
        assert_eq!(got.protected_names, base.protected_names);
        assert_eq!(got.env_allow, base.env_allow);
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
}
