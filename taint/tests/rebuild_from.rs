//! `Session::rebuild_from`: a session rebuilt from a sealed journal's
//! verified entries is the session `Session::rebuild` gives over the same
//! records, and entries that do not have their kind's shape are refused.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::collections::BTreeSet;

use palisade_evidence::{
    Body, Durability, Entry, JournalKey, JournalState, JournalWriter, Kind, Timestamp,
    VerifiedEntry, Verifier, WriterOptions,
};
use palisade_schema::host_policy::parse;
use palisade_taint::{
    EVIDENCE_KIND, Event, RebuildError, Record, Rules, Session, Source, TaintSource, TaintState,
    ToolClass,
};
use proptest::prelude::*;

const POLICY: &str = r#"
[worker]
cwd = "/w"
[taint]
sources = ["web", "proxy_non_relay", "untrusted_path", "marked_file"]
untrusted_paths = ["inbox/**"]
marked = ["vendor/**"]
steering_paths = ["AGENTS.md"]
[[routing]]
paths = ["private/**"]
providers = ["claude"]
"#;

fn rules(policy: &str) -> Rules {
    let p = parse("p.toml", policy).unwrap().into_value();
    Rules::new(&p, &[]).unwrap()
}

/// Writes `entries` to a fresh journal, closes it and reads it back through
/// the verifier.
#[allow(
    clippy::disallowed_methods,
    reason = "the test reads back the journal it wrote; the crate itself does no IO"
)]
fn journal(entries: &[Entry]) -> Vec<VerifiedEntry> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let key = JournalKey::from_bytes([3; palisade_evidence::KEY_LEN], 0);
    let options = WriterOptions::default().with_durability(Durability::Unsynced);
    let writer = JournalWriter::create(&path, &key, &options, Timestamp(0)).unwrap();
    let mut last = 0;
    for e in entries {
        last = last.max(e.time.as_unix_millis());
        writer.append(e).unwrap();
    }
    writer.close(Timestamp(last)).unwrap();
    let mut verifier = Verifier::new(std::fs::File::open(&path).unwrap(), &key, None);
    let out: Vec<_> = verifier.by_ref().map(Result::unwrap).collect();
    assert_eq!(verifier.finish().state(), JournalState::Closed);
    out
}

fn event_entry(session: &str, record: &Record) -> Entry {
    Entry::new(
        Timestamp(record.at_ms),
        session,
        Kind::custom(EVIDENCE_KIND).unwrap(),
        Body::from_serialize(record).unwrap(),
    )
}

fn entry(session: &str, at: u64, kind: Kind, body: serde_json::Value) -> Entry {
    Entry::new(
        Timestamp(at),
        session,
        kind,
        Body::from_value(&body).unwrap(),
    )
}

fn any_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0..4usize).prop_map(|t| Event::ToolResult {
            tool: [
                ToolClass::Web,
                ToolClass::ExternalMcp,
                ToolClass::Shell,
                ToolClass::Local
            ][t],
            name: "t".into(),
        }),
        prop::sample::select(vec!["inbox/a", "src/b", "private/c", "vendor/d"])
            .prop_map(|p| Event::Read { path: p.into() }),
        prop::sample::select(vec!["AGENTS.md", "src/b"])
            .prop_map(|p| Event::Write { path: p.into() }),
        (
            any::<bool>(),
            prop::sample::select(vec!["a.example", "B.example."])
        )
            .prop_map(|(relay, host)| Event::Connect {
                host: host.into(),
                port: 443,
                relay,
            }),
        Just(Event::UntrustedInput { label: "x".into() }),
        Just(Event::Outward {
            kind: "git.push".into(),
            target: "x".into(),
        }),
    ]
}

fn sources(session: &Session) -> BTreeSet<Source> {
    match session.taint() {
        TaintState::Clean => BTreeSet::new(),
        TaintState::Tainted { sources, .. } => sources.clone(),
    }
}

/// The `taint_raised` body a governed session writes for a new source.
fn taint_body(class: TaintSource, detail: &str, first: bool) -> serde_json::Value {
    serde_json::json!({
        "source": class.to_string(),
        "class": class.to_string(),
        "detail": detail,
        "first": first,
        "reported_by": "test",
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The journal a session writes (its events, the `taint_raised` records
    /// a governed session adds for every new source, and unrelated records)
    /// rebuilds into the session `rebuild` gives over the events alone.
    #[test]
    fn rebuild_from_equals_rebuild(
        steps in proptest::collection::vec((0..50u64, any_event(), 0..3u8), 0..24)
    ) {
        let r = rules(POLICY);
        let mut at = 1_000;
        let mut records = Vec::new();
        let mut entries = Vec::new();
        let mut shadow = Session::new();
        for (delta, event, noise) in steps {
            at += delta;
            let record = Record::new(at, event);
            entries.push(event_entry("s1", &record));
            let before = sources(&shadow);
            let fx = shadow.apply(&r, at, &record.event);
            if let Some(class) = fx.tainted_by {
                for new in sources(&shadow).difference(&before) {
                    let body = taint_body(class, &new.detail, fx.newly_tainted);
                    entries.push(entry("s1", at, Kind::TaintRaised, body));
                }
            }
            match noise {
                1 => entries.push(entry(
                    "s1",
                    at,
                    Kind::EgressConnection,
                    serde_json::json!({"host": "x", "decision": "deny"}),
                )),
                2 => entries.push(entry(
                    "s1",
                    at,
                    Kind::custom("my.own").unwrap(),
                    serde_json::json!({"type": "read", "path": "inbox/a"}),
                )),
                _ => {}
            }
            records.push(record);
        }
        let verified = journal(&entries);
        let rebuilt = Session::rebuild_from(&r, &verified).unwrap();
        prop_assert_eq!(&rebuilt, &Session::rebuild(&r, &records));
        prop_assert_eq!(rebuilt, shadow);
    }
}

#[test]
fn a_governed_journal_rebuilds_its_taint_whatever_the_rules_say_now() {
    let entries = journal(&[
        entry(
            "s1",
            5,
            Kind::EgressConnection,
            serde_json::json!({"host": "a.example"}),
        ),
        entry(
            "s1",
            7,
            Kind::TaintRaised,
            taint_body(TaintSource::Web, "fetch", true),
        ),
    ]);
    // Rules that no longer count web results as untrusted.
    let relaxed = rules("[taint]\nsources = []\n");
    let s = Session::rebuild_from(&relaxed, &entries).unwrap();
    assert!(s.is_tainted());
    assert_eq!(s.first_tainted_at_ms(), Some(7));
    assert_eq!(
        s.first_source(),
        Some(&Source::new(TaintSource::Web, "fetch"))
    );
    // The control: the same journal without its taint record stays clean
    // (entries: opened, egress, taint, closed).
    let without: Vec<_> = entries
        .iter()
        .filter(|e| *e.kind() != Kind::TaintRaised)
        .cloned()
        .collect();
    assert_eq!(without.len(), entries.len() - 1);
    assert!(
        !Session::rebuild_from(&relaxed, &without)
            .unwrap()
            .is_tainted()
    );
}

#[test]
fn malformed_entries_are_refused_with_their_seq() {
    let r = rules(POLICY);
    let good = Record::new(
        1,
        Event::Read {
            path: "inbox/a".into(),
        },
    );
    let entries = journal(&[
        event_entry("s1", &good),
        entry(
            "s1",
            2,
            Kind::custom(EVIDENCE_KIND).unwrap(),
            serde_json::json!({"at_ms": 2, "event": {"type": "teleport"}}),
        ),
        entry(
            "s1",
            3,
            Kind::TaintRaised,
            serde_json::json!({"class": "gossip", "detail": "x"}),
        ),
        entry(
            "s1",
            4,
            Kind::TaintRaised,
            serde_json::json!({"class": "web"}),
        ),
    ]);
    // seq 0 is `journal_opened`; the records follow from seq 1.
    assert!(
        Session::rebuild_from(&r, &entries[..2])
            .unwrap()
            .is_tainted()
    );
    let err = Session::rebuild_from(&r, &entries[..3]).unwrap_err();
    assert!(matches!(err, RebuildError::Event { seq: 2, .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("journal record seq 2: not a session event"),
        "{err}"
    );
    for bad in [3, 4] {
        let mut some = entries[..2].to_vec();
        some.push(entries[bad].clone());
        let err = Session::rebuild_from(&r, &some).unwrap_err();
        assert!(
            matches!(err, RebuildError::Taint { seq, .. } if seq == bad as u64),
            "{err}"
        );
    }
}

#[test]
fn entries_of_two_sessions_or_out_of_order_are_refused() {
    let r = rules(POLICY);
    let read = |at, path: &str| Record::new(at, Event::Read { path: path.into() });
    let connect = Record::new(
        3,
        Event::Connect {
            host: "a.example".into(),
            port: 443,
            relay: true,
        },
    );
    let entries = journal(&[
        event_entry("s1", &read(1, "src/b")),
        event_entry("s2", &connect),
        event_entry("s1", &read(4, "inbox/c")),
    ]);
    let err = Session::rebuild_from(&r, &entries).unwrap_err();
    assert_eq!(
        err,
        RebuildError::MixedSessions {
            seq: 2,
            expected: "s1".into(),
            found: "s2".into()
        }
    );
    // The control: one session's entries, in order, rebuild (without the
    // other session's contacted host).
    let own: Vec<_> = entries
        .iter()
        .filter(|e| e.session() != "s2")
        .cloned()
        .collect();
    let s = Session::rebuild_from(&r, &own).unwrap();
    assert!(s.is_tainted());
    assert_eq!(s.contacted().count(), 0);
    let mut reversed = own.clone();
    reversed.reverse();
    let err = Session::rebuild_from(&r, &reversed).unwrap_err();
    assert!(matches!(err, RebuildError::OutOfOrder { .. }), "{err}");
}

/// A policy whose globs overlap: `private/vendor/**` is both marked and
/// routed, `inbox/**` both untrusted and routed.
const OVERLAP: &str = r#"
[worker]
cwd = "/w"
[taint]
untrusted_paths = ["inbox/**"]
marked = ["private/vendor/**"]
[[routing]]
paths = ["private/**"]
providers = ["anthropic"]
[[routing]]
paths = ["inbox/**"]
providers = []
"#;

fn routing_body(path: &str) -> serde_json::Value {
    serde_json::json!({"path": path, "rules": ["routing[0]"], "by": "observer"})
}

fn read_path() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "private/vendor/a",
        "/w/private/vendor/a",
        "private/b",
        "inbox/m",
        "src/c",
        "private/../src/d",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A read of a path that is both marked (or untrusted) and routed
    /// raises the taint once and records the restricted read once, however
    /// often it is read and in whatever spelling.
    #[test]
    fn an_overlapping_read_taints_and_restricts_once(paths in proptest::collection::vec(read_path(), 1..12)) {
        let r = rules(OVERLAP);
        let mut s = Session::new();
        let mut newly = 0;
        for (t, p) in paths.iter().enumerate() {
            let fx = s.apply(&r, t as u64, &Event::Read { path: (*p).to_owned() });
            newly += usize::from(fx.newly_tainted);
            let forms = r.path_forms(p);
            let restricted = forms.iter().any(|f| f.starts_with("private/") || f.starts_with("inbox/"));
            prop_assert_eq!(fx.restricted_read, restricted, "{}", p);
            let marked = forms.iter().any(|f| f.starts_with("private/vendor/"));
            let untrusted = forms.iter().any(|f| f.starts_with("inbox/"));
            if marked || untrusted {
                prop_assert!(fx.tainted_by.is_some(), "{}", p);
                prop_assert!(s.is_tainted());
            }
        }
        prop_assert!(newly <= 1, "tainted anew {} times", newly);
        // One restricted read per distinct path, whatever the spelling.
        let distinct: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| r.path_forms(p).into_iter().next())
            .filter(|abs| abs.starts_with("/w/private/") || abs.starts_with("/w/inbox/"))
            .collect();
        let reads: BTreeSet<String> = s.restricted_reads().map(str::to_owned).collect();
        prop_assert_eq!(reads, distinct);
    }

    /// A governed session's journal (a `taint_raised` record for each new
    /// source and a `routing_read` record for each restricted read, no
    /// `session_event`) rebuilds the session's taint and routing state.
    #[test]
    fn a_governed_journal_rebuilds_the_routing_state(paths in proptest::collection::vec(read_path(), 0..12)) {
        let r = rules(OVERLAP);
        let mut real = Session::new();
        let mut entries = Vec::new();
        for (t, p) in paths.iter().enumerate() {
            let at = 10 + t as u64;
            let before = sources(&real);
            let fx = real.apply(&r, at, &Event::Read { path: (*p).to_owned() });
            if let Some(class) = fx.tainted_by {
                for new in sources(&real).difference(&before) {
                    entries.push(entry("s1", at, Kind::TaintRaised, taint_body(class, &new.detail, fx.newly_tainted)));
                }
            }
            if fx.new_restricted_read {
                entries.push(entry("s1", at, Kind::custom(palisade_taint::ROUTING_READ_KIND).unwrap(), routing_body(p)));
            }
        }
        let verified = journal(&entries);
        let rebuilt = Session::rebuild_from(&r, &verified).unwrap();
        prop_assert_eq!(&rebuilt, &real);
        // Control: without its routing_read records the journal loses the
        // routing state (whenever there was one to lose).
        let without: Vec<_> = verified
            .iter()
            .filter(|e| e.kind().as_str() != palisade_taint::ROUTING_READ_KIND)
            .cloned()
            .collect();
        let lost = Session::rebuild_from(&r, &without).unwrap();
        prop_assert_eq!(lost.restricted_reads().count(), 0);
        prop_assert_eq!(lost.is_tainted(), real.is_tainted());
    }
}

#[test]
fn a_routing_read_is_kept_whatever_the_rules_say_now() {
    let kind = Kind::custom(palisade_taint::ROUTING_READ_KIND).unwrap();
    let entries = journal(&[entry("s1", 3, kind, routing_body("private/x"))]);
    // Rules without any routing rule any more still keep the read.
    let relaxed = rules("[worker]\ncwd = \"/w\"\n");
    let s = Session::rebuild_from(&relaxed, &entries).unwrap();
    assert_eq!(s.restricted_reads().collect::<Vec<_>>(), ["/w/private/x"]);
    // And under the routing rules it is the form an observed read keeps.
    let r = rules(OVERLAP);
    let mut observed = Session::new();
    let _ = observed.apply(
        &r,
        3,
        &Event::Read {
            path: "/w/private/x".into(),
        },
    );
    assert_eq!(Session::rebuild_from(&r, &entries).unwrap(), observed);
    assert!(!observed.is_tainted());
}

#[test]
fn malformed_routing_reads_are_refused_with_their_seq() {
    let r = rules(OVERLAP);
    let kind = Kind::custom(palisade_taint::ROUTING_READ_KIND).unwrap();
    let entries = journal(&[
        entry("s1", 1, kind.clone(), routing_body("private/ok")),
        entry(
            "s1",
            2,
            kind.clone(),
            serde_json::json!({"rules": [], "by": "observer"}),
        ),
        entry(
            "s1",
            3,
            kind.clone(),
            serde_json::json!({"path": 7, "rules": [], "by": "observer"}),
        ),
        entry(
            "s1",
            4,
            kind.clone(),
            serde_json::json!({"path": "p", "rules": "routing[0]", "by": "observer"}),
        ),
        entry("s1", 5, kind, serde_json::json!({"path": "p", "rules": []})),
    ]);
    // Positive control: the well-formed record alone rebuilds.
    assert_eq!(
        Session::rebuild_from(&r, &entries[..2])
            .unwrap()
            .restricted_reads()
            .count(),
        1
    );
    for bad in 2..=5 {
        let mut some = entries[..2].to_vec();
        some.push(entries[bad].clone());
        let err = Session::rebuild_from(&r, &some).unwrap_err();
        assert!(
            matches!(err, RebuildError::Routing { seq, .. } if seq == bad as u64),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("journal record seq {bad}: not a routing read")),
            "{err}"
        );
    }
}
