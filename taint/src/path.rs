//! Lexical path normalisation and the marks file format.

/// The forms of `path` that globs are matched against.
///
/// The path is normalised lexically (`.` and empty segments removed, `..`
/// applied; `..` never climbs above `/`). With a working directory `cwd`,
/// a relative path is first joined to it; the result is the absolute path
/// and, when it lies under `cwd`, also the path relative to `cwd`. Without
/// `cwd`, the normalised path as given is the only form. Symbolic links are
/// not resolved: this crate does no IO.
pub fn normalize_path(path: &str, cwd: Option<&str>) -> Vec<String> {
    match cwd {
        Some(cwd) if cwd.starts_with('/') => {
            let joined = if path.starts_with('/') {
                path.to_owned()
            } else {
                format!("{cwd}/{path}")
            };
            let abs = lexical(&joined);
            let base = lexical(cwd);
            let mut out = vec![abs.clone()];
            let rel = if base == "/" {
                abs.strip_prefix('/')
            } else {
                abs.strip_prefix(base.as_str())
                    .and_then(|r| r.strip_prefix('/'))
            };
            if let Some(rel) = rel
                && !rel.is_empty()
            {
                out.push(rel.to_owned());
            }
            out
        }
        _ => vec![lexical(path)],
    }
}

fn lexical(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// Parses the marks file that `palisade mark-untrusted` maintains: one path
/// per line, blank lines and lines starting with `#` ignored, surrounding
/// whitespace trimmed.
pub fn parse_marks(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_lexically() {
        assert_eq!(normalize_path("a/./b/../c", None), vec!["a/c"]);
        assert_eq!(normalize_path("../x", None), vec!["../x"]);
        assert_eq!(normalize_path("/../etc", None), vec!["/etc"]);
        assert_eq!(
            normalize_path("private/../private/k", Some("/w")),
            vec!["/w/private/k", "private/k"]
        );
        assert_eq!(
            normalize_path("/w/inbox/m", Some("/w/")),
            vec!["/w/inbox/m", "inbox/m"]
        );
        assert_eq!(normalize_path("../other/f", Some("/w")), vec!["/other/f"]);
        assert_eq!(normalize_path("/wx/f", Some("/w")), vec!["/wx/f"]);
    }

    #[test]
    fn marks_skip_comments() {
        assert_eq!(parse_marks("# c\n\n a.txt \nb/\n"), vec!["a.txt", "b/"]);
    }
}
