//! Hostile YAML that stays inside palisade's per-event limits (size,
//! depth, aliases, nodes) but would still make the tree builder allocate
//! far more than the document holds.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use palisade_schema::yaml::{self, MAX_DEPTH, MAX_NODES};

/// `depth` nested sequences around one list of `leaves` scalars, each
/// sequence anchored when `anchored` (no alias anywhere).
fn nested(depth: usize, leaves: usize, anchored: bool) -> String {
    let mut s = String::from("a: ");
    for i in 0..depth {
        if anchored {
            s.push_str(&format!("&a{i} "));
        }
        s.push('[');
    }
    s.push_str(&vec!["x"; leaves].join(", "));
    s.push_str(&"]".repeat(depth));
    s.push('\n');
    s
}

fn code(text: &str) -> Option<String> {
    match yaml::parse("x.yml", text) {
        Ok(_) => None,
        Err(d) => Some(d.into_vec().remove(0).code.to_string()),
    }
}

#[test]
fn nested_anchors_without_aliases_cannot_multiply_the_tree() {
    // Every anchored node is kept for later aliases. Nested anchors keep
    // each level's subtree again, so 60 levels around 10,000 scalars hold
    // 600,000 nodes (a 1 MiB file: ~30 million) though no alias exists.
    let depth = MAX_DEPTH - 4;
    let leaves = 10_000;
    assert!(depth * leaves > MAX_NODES);
    // Positive controls: the same tree without anchors, and with one
    // anchor, is read.
    assert_eq!(code(&nested(depth, leaves, false)), None);
    assert_eq!(
        code(&format!("b: &b [x, y]\n{}", nested(depth, leaves, false))),
        None
    );
    assert_eq!(code(&nested(3, 100, true)), None);
    assert_eq!(
        code(&nested(depth, leaves, true)).as_deref(),
        Some("yaml_limit_exceeded")
    );
}
