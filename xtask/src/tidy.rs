//! Tidy checks: the architecture's invariants, as tests, so that
//! `cargo test --workspace` is the whole gate.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use crate::workspace_root;

    /// The allowed internal dependencies of each crate (normal dependencies
    /// only). ARCHITECTURE.md draws the same graph; keep both in step.
    const ALLOWED_INTERNAL: &[(&str, &[&str])] = &[
        ("palisade-schema", &[]),
        ("palisade-taint", &["palisade-schema"]),
        ("palisade-policy", &["palisade-schema", "palisade-taint"]),
        ("palisade-evidence", &[]),
        (
            "palisade-egress",
            &[
                "palisade-schema",
                "palisade-policy",
                "palisade-taint",
                "palisade-evidence",
            ],
        ),
        ("palisade-isolate", &["palisade-schema"]),
        (
            "palisade-cli",
            &[
                "palisade-schema",
                "palisade-policy",
                "palisade-taint",
                "palisade-evidence",
                "palisade-egress",
                "palisade-isolate",
            ],
        ),
        ("palisade-xtask", &[]),
        // examples/orchestrator: an embedder of every library crate but
        // egress (it decides egress through policy and runs no proxy).
        (
            "palisade-example-orchestrator",
            &[
                "palisade-schema",
                "palisade-policy",
                "palisade-taint",
                "palisade-evidence",
                "palisade-isolate",
            ],
        ),
    ];

    /// Internal dependencies a crate may have only as an optional
    /// dependency behind the named feature (the dashed edges of
    /// ARCHITECTURE.md's graph): `(crate, dependency, feature)`.
    const OPTIONAL_INTERNAL: &[(&str, &str, &str)] =
        &[("palisade-taint", "palisade-evidence", "evidence")];

    /// External crates that would break a crate's invariant if they ever
    /// became a normal dependency of it.
    const FORBIDDEN_EXTERNAL: &[(&str, &[&str])] = &[
        (
            "palisade-schema",
            &["tokio", "libc", "nix", "hyper", "rustls"],
        ),
        (
            "palisade-policy",
            &["tokio", "libc", "nix", "hyper", "rustls"],
        ),
        (
            "palisade-taint",
            &["tokio", "libc", "nix", "hyper", "rustls"],
        ),
        ("palisade-evidence", &["tokio", "hyper", "rustls"]),
    ];

    fn metadata() -> serde_json::Value {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(workspace_root())
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
    }

    /// Normal (non-dev, non-build) dependency names of each workspace member.
    fn normal_deps(meta: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
        let members: BTreeSet<&str> = meta["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m.as_str())
            .collect();
        let mut out = BTreeMap::new();
        for pkg in meta["packages"].as_array().unwrap() {
            if !members.contains(pkg["id"].as_str().unwrap()) {
                continue;
            }
            let name = pkg["name"].as_str().unwrap();
            let mut deps = BTreeSet::new();
            for d in pkg["dependencies"].as_array().unwrap() {
                if !d["kind"].is_null() {
                    continue;
                }
                let dep = d["name"].as_str().unwrap();
                let optional = OPTIONAL_INTERNAL
                    .iter()
                    .find(|(krate, allowed, _)| *krate == name && *allowed == dep);
                match optional {
                    // Allowed only as `optional = true`, switched on by its
                    // feature alone.
                    Some((_, _, feature)) => {
                        assert_eq!(
                            d["optional"].as_bool(),
                            Some(true),
                            "{name} may depend on {dep} only as an optional dependency (see ARCHITECTURE.md)"
                        );
                        let enabling: Vec<&str> = pkg["features"]
                            .as_object()
                            .unwrap()
                            .iter()
                            .filter(|(_, list)| {
                                list.as_array().unwrap().iter().any(|f| {
                                    f.as_str()
                                        .is_some_and(|f| f == format!("dep:{dep}") || f == dep)
                                })
                            })
                            .map(|(f, _)| f.as_str())
                            .collect();
                        assert_eq!(
                            enabling,
                            [*feature],
                            "{name}: only the `{feature}` feature may enable {dep}"
                        );
                    }
                    None => {
                        deps.insert(dep.to_owned());
                    }
                }
            }
            out.insert(name.to_owned(), deps);
        }
        out
    }

    #[test]
    fn internal_dependencies_follow_the_architecture() {
        let deps = normal_deps(&metadata());
        let allowed: BTreeMap<&str, &[&str]> = ALLOWED_INTERNAL.iter().copied().collect();
        for (name, deps) in &deps {
            let allow = allowed
                .get(name.as_str())
                .unwrap_or_else(|| panic!("{name} is missing from ALLOWED_INTERNAL"));
            for dep in deps.iter().filter(|d| d.starts_with("palisade-")) {
                assert!(
                    allow.contains(&dep.as_str()),
                    "{name} must not depend on {dep} (see ARCHITECTURE.md)"
                );
            }
        }
        for (name, forbidden) in FORBIDDEN_EXTERNAL {
            let Some(deps) = deps.get(*name) else {
                continue;
            };
            for dep in *forbidden {
                assert!(
                    !deps.contains(*dep),
                    "{name} must not depend on {dep} (see ARCHITECTURE.md)"
                );
            }
        }
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | ".git" | "corpus" | "artifacts" | "data"
                ) {
                    rust_files(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }

    fn all_rust_files() -> Vec<(PathBuf, String)> {
        let root = workspace_root();
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p.strip_prefix(&root).unwrap().to_path_buf(), text)
            })
            .collect()
    }

    /// Crates whose `__` internals (`__fuzz`, `__sign`, ...) have moved
    /// behind the `testing` feature; the others join as theirs move.
    const INTERNALS_GATED: &[&str] = &["evidence/src", "policy/src", "taint/src"];

    #[test]
    fn internals_sit_behind_the_testing_feature() {
        let gate = r#"#[cfg(any(fuzzing, feature = "testing"))]"#;
        let mut ungated = Vec::new();
        let mut seen = 0;
        for (path, text) in all_rust_files() {
            if !INTERNALS_GATED.iter().any(|dir| path.starts_with(dir)) {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let item = line.trim_start();
                let internal = ["pub mod __", "pub fn __", "pub struct __", "pub use "]
                    .iter()
                    .any(|p| {
                        item.starts_with(p) && (!p.ends_with("use ") || item.contains("::__"))
                    });
                if !internal {
                    continue;
                }
                seen += 1;
                // The gate is among the attributes right above the item.
                let attrs = lines[..i].iter().rev().take_while(|l| {
                    l.trim_start().starts_with("#[") || l.trim_start().starts_with("///")
                });
                if !attrs.into_iter().any(|l| l.trim() == gate) {
                    ungated.push(format!("{}:{}", path.display(), i + 1));
                }
            }
        }
        assert!(seen > 0, "no internals found: is the scan still right?");
        assert!(
            ungated.is_empty(),
            "internals without `{gate}` (not part of the public API): {ungated:?}"
        );
    }

    #[test]
    fn every_rust_file_starts_with_a_module_doc() {
        let missing: Vec<_> = all_rust_files()
            .into_iter()
            .filter(|(_, text)| !text.trim_start().starts_with("//!"))
            .map(|(p, _)| p)
            .collect();
        assert!(
            missing.is_empty(),
            "files without a leading //! doc comment: {missing:?}"
        );
    }

    #[test]
    fn unsafe_lives_only_in_isolate_and_is_justified() {
        let needle = ["un", "safe "].concat();
        for (path, text) in all_rust_files() {
            let in_isolate = path.starts_with("isolate/src");
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let is_block = code.contains(&format!("{needle}{{"))
                    || code.contains(&format!("{needle}impl"));
                if !is_block {
                    continue;
                }
                assert!(
                    in_isolate,
                    "{}:{}: unsafe outside isolate/src",
                    path.display(),
                    i + 1
                );
                let justified = lines[..i]
                    .iter()
                    .rev()
                    .take(8)
                    .any(|l| l.contains("SAFETY:"));
                assert!(
                    justified,
                    "{}:{}: unsafe block without a // SAFETY: comment",
                    path.display(),
                    i + 1
                );
            }
        }
    }

    #[test]
    fn architecture_mentions_every_crate() {
        let arch = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).unwrap();
        for (name, _) in ALLOWED_INTERNAL {
            assert!(
                arch.contains(name),
                "ARCHITECTURE.md does not mention {name}"
            );
        }
    }
}
