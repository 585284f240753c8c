//! Did-you-mean: the known name closest to a misspelt one, shared by every
//! reader (the host policy's TOML, the hub workflow's and trigger
//! document's YAML, provider options), so a typo gets the same hint
//! everywhere.

/// The known name closest to `name` by edit distance, if it is close: at
/// most a third of the known name's length in edits (at least 1), so
/// `deamon` finds `daemon` but `hooks` does not find `tools`.
/// Ties go to the first in `known`. Bounded: names longer than
/// [`MAX_NAME_CHARS`] are not compared (a hostile key costs nothing).
pub(crate) fn nearest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    if name.chars().count() > MAX_NAME_CHARS {
        return None;
    }
    known
        .iter()
        .filter(|k| k.chars().count() <= MAX_NAME_CHARS)
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, k)| *d <= 1.max(k.chars().count() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `did you mean `x`?` for `name` among `known`, if one is close.
pub(crate) fn did_you_mean(name: &str, known: &[&str]) -> Option<String> {
    nearest(name, known).map(|k| format!("did you mean `{k}`?"))
}

/// The longest name compared, in characters.
pub(crate) const MAX_NAME_CHARS: usize = 128;

/// Edit distance counting an insertion, a deletion, a substitution or a
/// swap of two neighbours as one edit (optimal string alignment, by
/// `strsim`, in characters), so the commonest typo, two letters swapped,
/// is one edit. Both names are at most [`MAX_NAME_CHARS`] long here.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(
            nearest("from_user", &["workspace", "from_users"]),
            Some("from_users")
        );
        assert_eq!(
            nearest("slack.mentoin", &["discord.mention", "slack.mention"]),
            Some("slack.mention")
        );
        assert_eq!(nearest("zzzzzz", &["from_users"]), None);
        assert_eq!(nearest("hooks", &["tools"]), None);
        assert_eq!(nearest("deamon", &["daemon"]), Some("daemon"));
        assert_eq!(nearest("gti", &["http", "git"]), Some("git"));
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(nearest(&"x".repeat(MAX_NAME_CHARS + 1), &["x"]), None);
        assert_eq!(
            did_you_mean("stpes", &["steps"]).as_deref(),
            Some("did you mean `steps`?")
        );
    }
}
