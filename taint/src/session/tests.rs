//! Unit tests of the session state machine.

use palisade_schema::host_policy::parse;

use super::*;

const POLICY: &str = r#"
[worker]
cwd = "/w"
[taint]
sources = ["web", "proxy_non_relay", "untrusted_path", "marked_file"]
untrusted_paths = ["inbox/**"]
marked = ["vendor/**"]
steering_paths = ["AGENTS.md", ".paseo/**"]
[[routing]]
paths = ["private/**"]
providers = ["claude"]
"#;

fn rules(marks: &[&str]) -> Rules {
    let (p, _) = parse("p.toml", POLICY).unwrap().into_parts();
    let marks: Vec<String> = marks.iter().map(|s| (*s).to_owned()).collect();
    Rules::new(&p, &marks).unwrap()
}

fn read(path: &str) -> Event {
    Event::Read { path: path.into() }
}

#[test]
fn clean_until_untrusted_then_sticky() {
    let r = rules(&[]);
    let mut s = Session::new();
    assert!(!s.apply(&r, 1, &read("src/main.rs")).newly_tainted);
    assert!(!s.is_tainted());
    let fx = s.apply(&r, 5, &read("inbox/../inbox/mail.eml"));
    assert!(fx.newly_tainted);
    assert_eq!(fx.tainted_by, Some(TaintSource::UntrustedPath));
    assert_eq!(s.first_tainted_at_ms(), Some(5));
    // Later clean events never clear it, and the first time is kept.
    let fx = s.apply(
        &r,
        9,
        &Event::ToolResult {
            tool: ToolClass::Web,
            name: "fetch".into(),
        },
    );
    assert!(!fx.newly_tainted);
    assert!(s.is_tainted());
    assert_eq!(s.first_tainted_at_ms(), Some(5));
    // ... and so is the source that tainted it first.
    let first = s.first_source().unwrap();
    assert_eq!(
        (first.source, first.detail.as_str(), first.source.as_str()),
        (
            TaintSource::UntrustedPath,
            "inbox/mail.eml",
            "untrusted_path"
        )
    );
}

#[test]
fn disabled_sources_do_not_taint_but_input_always_does() {
    let r = rules(&[]);
    let mut s = Session::new();
    let _ = s.apply(
        &r,
        1,
        &Event::ToolResult {
            tool: ToolClass::Shell,
            name: "bash".into(),
        },
    );
    assert!(!s.is_tainted(), "shell is not an enabled source here");
    let _ = s.apply(
        &r,
        2,
        &Event::UntrustedInput {
            label: "email".into(),
        },
    );
    assert!(s.is_tainted());
}

#[test]
fn relay_connections_do_not_taint_direct_ones_do() {
    let r = rules(&[]);
    let mut s = Session::new();
    let _ = s.apply(
        &r,
        1,
        &Event::Connect {
            host: "API.anthropic.com.".into(),
            port: 443,
            relay: true,
        },
    );
    assert!(!s.is_tainted());
    assert!(s.has_contacted(&RequestHost::parse("api.anthropic.com").unwrap(), 443));
    assert!(!s.has_contacted(&RequestHost::parse("api.anthropic.com").unwrap(), 80));
    let _ = s.apply(
        &r,
        2,
        &Event::Connect {
            host: "example.com".into(),
            port: 443,
            relay: false,
        },
    );
    assert!(s.is_tainted());
}

#[test]
fn marked_files_from_the_marks_file_taint() {
    let r = rules(&["notes/shared.md", "/w/downloads"]);
    let mut s = Session::new();
    let _ = s.apply(&r, 1, &read("notes/other.md"));
    assert!(!s.is_tainted(), "positive control: an unmarked file");
    let _ = s.apply(&r, 2, &read("/w/notes/shared.md"));
    assert!(s.is_tainted());
    let mut s = Session::new();
    let _ = s.apply(&r, 3, &read("downloads/x/y.pdf"));
    assert_eq!(
        s.taint(),
        &TaintState::Tainted {
            sources: BTreeSet::from([Source {
                source: TaintSource::MarkedFile,
                detail: "downloads/x/y.pdf".into()
            }]),
            more_sources: 0,
            first_at_ms: 3
        }
    );
}

fn marked_rules(marked: &str) -> Rules {
    let text = format!(
        "[worker]\ncwd = \"/w\"\n[taint]\nsources = [\"marked_file\"]\nmarked = {marked}\n"
    );
    let (p, _) = parse("p.toml", &text).unwrap().into_parts();
    Rules::new(&p, &[]).unwrap()
}

fn taints(r: &Rules, path: &str) -> bool {
    let mut s = Session::new();
    s.apply(r, 1, &read(path)).newly_tainted
}

#[test]
fn a_literal_marked_path_covers_everything_below_it_like_a_mark() {
    // `taint.marked = ["notes"]` means what a marks-file entry `notes`
    // means: the path and everything below it.
    let r = marked_rules(r#"["notes", "/srv/feeds/", "./docs"]"#);
    let marks = rules(&["notes"]);
    for path in [
        "notes",
        "notes/untrusted.md",
        "/w/notes/a/b.md",
        "./notes/x",
        "/srv/feeds",
        "/srv/feeds/today.xml",
        "docs/x",
    ] {
        assert!(taints(&r, path), "{path}: below a literal marked path");
    }
    assert!(
        taints(&marks, "notes/untrusted.md"),
        "the marks file agrees"
    );
    // Positive control: neighbours and prefixes of the name are not below it.
    for path in [
        "notesx/y",
        "other/notes",
        "/srv/feedsx",
        "lib/docs/x",
        "/w/no",
        "docsx",
    ] {
        assert!(!taints(&r, path), "{path}: not below a marked path");
    }
    // A glob still means what it says: `vendor/*.md` does not cover a
    // deeper file, and `vendor/**` is not a literal.
    let g = marked_rules(r#"["vendor/*.md", "lit\\*"]"#);
    assert!(taints(&g, "vendor/a.md"), "control: the glob matches");
    assert!(!taints(&g, "vendor/a.md/x"));
    assert!(!taints(&g, "vendor/sub/a.md"));
    assert!(
        taints(&g, "lit*"),
        "control: an escaped glob matches its name"
    );
    assert!(!taints(&g, "lit*/x"), "an escaped glob is still a glob");
}

#[test]
fn steering_writes_are_flagged() {
    let r = rules(&[]);
    let mut s = Session::new();
    let fx = s.apply(
        &r,
        1,
        &Event::Write {
            path: "src/lib.rs".into(),
        },
    );
    assert_eq!(fx.steering_write, None);
    let fx = s.apply(
        &r,
        2,
        &Event::Write {
            path: "/w/.paseo/workflows/x.yml".into(),
        },
    );
    assert_eq!(
        fx.steering_write,
        Some(SteeringWrite {
            path: ".paseo/workflows/x.yml".into(),
            tainted: false
        })
    );
    let _ = s.apply(&r, 3, &read("inbox/m"));
    let fx = s.apply(
        &r,
        4,
        &Event::Write {
            path: "AGENTS.md".into(),
        },
    );
    assert_eq!(fx.steering_write.map(|w| w.tainted), Some(true));
    assert_eq!(s.steering_writes(), 2);
}

#[test]
fn restricted_reads_are_remembered() {
    let r = rules(&[]);
    let mut s = Session::new();
    assert!(!s.apply(&r, 1, &read("public/a")).restricted_read);
    assert!(s.apply(&r, 2, &read("./private/key.txt")).restricted_read);
    assert_eq!(
        s.restricted_reads().collect::<Vec<_>>(),
        vec!["/w/private/key.txt"]
    );
}

#[test]
fn a_restricted_read_is_new_once() {
    let r = rules(&[]);
    let mut s = Session::new();
    let fx = s.apply(&r, 1, &read("private/a"));
    assert!(fx.restricted_read && fx.new_restricted_read);
    // The same file again, in another spelling: restricted, not new.
    let fx = s.apply(&r, 2, &read("/w/private/../private/a"));
    assert!(fx.restricted_read && !fx.new_restricted_read);
    // Positive control: another restricted file is new; an unrestricted one
    // is neither.
    assert!(s.apply(&r, 3, &read("private/b")).new_restricted_read);
    let fx = s.apply(&r, 4, &read("public/c"));
    assert!(!fx.restricted_read && !fx.new_restricted_read);
}

#[test]
fn restricted_reads_are_bounded_without_losing_a_rule() {
    let text = "[worker]\ncwd = \"/w\"\n[[routing]]\npaths = [\"private/**\"]\nproviders = [\"a\"]\n[[routing]]\npaths = [\"secret/**\"]\nproviders = []\n";
    let (p, _) = parse("p.toml", text).unwrap().into_parts();
    let r = Rules::new(&p, &[]).unwrap();
    let mut s = Session::new();
    let extra = 100;
    for i in 0..MAX_RESTRICTED_READS + extra {
        let _ = s.apply(&r, i as u64, &read(&format!("private/f{i}")));
    }
    assert_eq!(s.restricted_reads().count(), MAX_RESTRICTED_READS);
    assert_eq!(s.more_restricted_reads(), extra as u64);
    // A path restricted by another rule is kept beyond the bound: the bound
    // never drops what a decision depends on.
    let fx = s.apply(&r, 10_000, &read("secret/k"));
    assert!(fx.new_restricted_read);
    assert!(s.restricted_reads().any(|p| p == "/w/secret/k"));
    assert_eq!(s.restricted_reads().count(), MAX_RESTRICTED_READS + 1);
    // The count survives a JSON round trip; a session under the bound
    // serialises as before (no new key).
    let back: Session = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
    let small = serde_json::to_value(Session::new()).unwrap();
    assert!(small.get("more_restricted_reads").is_none(), "{small}");
}

#[test]
fn outward_actions_are_irreversible() {
    let r = rules(&[]);
    let mut s = Session::new();
    let fx = s.apply(
        &r,
        1,
        &Event::Outward {
            kind: "git.push".into(),
            target: "x".into(),
        },
    );
    assert!(fx.irreversible);
    assert!(!s.is_tainted());
}

#[test]
fn serializes_and_rebuilds() {
    let r = rules(&[]);
    let records = vec![
        Record {
            at_ms: 1,
            event: Event::Connect {
                host: "a.example".into(),
                port: 443,
                relay: true,
            },
        },
        Record {
            at_ms: 2,
            event: read("private/x"),
        },
        Record {
            at_ms: 3,
            event: Event::ToolResult {
                tool: ToolClass::Web,
                name: "search".into(),
            },
        },
    ];
    let mut live = Session::new();
    for rec in &records {
        let _ = live.apply(&r, rec.at_ms, &rec.event);
    }
    let rebuilt = Session::rebuild(&r, &records);
    assert_eq!(live, rebuilt);
    assert!(rebuilt.is_tainted());
    let json = serde_json::to_string(&live).unwrap();
    let back: Session = serde_json::from_str(&json).unwrap();
    assert_eq!(back, live);
    let rec_json = serde_json::to_string(&records[2]).unwrap();
    assert_eq!(
        rec_json,
        r#"{"at_ms":3,"event":{"type":"tool_result","tool":"web","name":"search"}}"#
    );
}

#[test]
fn sources_are_bounded() {
    let r = rules(&[]);
    let mut s = Session::new();
    for i in 0..(MAX_SOURCES as u64 + 10) {
        let _ = s.apply(&r, i, &read(&format!("inbox/{i}")));
    }
    match s.taint() {
        TaintState::Tainted {
            sources,
            more_sources,
            first_at_ms,
        } => {
            assert_eq!(sources.len(), MAX_SOURCES);
            assert_eq!(*more_sources, 10);
            assert_eq!(*first_at_ms, 0);
        }
        TaintState::Clean => panic!("expected taint"),
    }
}

fn any_event() -> impl proptest::strategy::Strategy<Value = Event> {
    use proptest::prelude::*;
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
        prop::sample::select(vec![
            "inbox/a",
            "src/b",
            "private/c",
            "vendor/d",
            "AGENTS.md"
        ])
        .prop_map(|p| Event::Read { path: p.into() }),
        prop::sample::select(vec!["AGENTS.md", "src/b", ".paseo/x"])
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

proptest::proptest! {
    /// Taint, its first time, contacted hosts and restricted reads only grow,
    /// whatever events follow.
    #[test]
    fn state_is_monotone(events in proptest::collection::vec(any_event(), 0..24)) {
        let r = rules(&[]);
        let mut s = Session::new();
        for (t, e) in events.iter().enumerate() {
            let before = s.clone();
            let _ = s.apply(&r, t as u64, e);
            if before.is_tainted() {
                proptest::prop_assert!(s.is_tainted(), "{:?} cleared taint", e);
                proptest::prop_assert_eq!(s.first_tainted_at_ms(), before.first_tainted_at_ms());
            }
            proptest::prop_assert!(before.contacted().all(|c| s.contacted().any(|d| d == c)));
            proptest::prop_assert!(before.restricted_reads().all(|c| s.restricted_reads().any(|d| d == c)));
            proptest::prop_assert!(s.steering_writes() >= before.steering_writes());
        }
    }
}

#[test]
fn taint_sources_display_as_the_journal_spells_them() {
    let all = [
        TaintSource::Web,
        TaintSource::ExternalMcp,
        TaintSource::Shell,
        TaintSource::ProxyNonRelay,
        TaintSource::UntrustedPath,
        TaintSource::MarkedFile,
        TaintSource::Input,
    ];
    for src in all {
        // The serde form is what `Record`s and `Source`s carry.
        let json = serde_json::to_value(src).unwrap();
        assert_eq!(json, serde_json::Value::String(src.to_string()), "{src:?}");
        assert_eq!(src.to_string(), src.as_str());
    }
    assert_eq!(TaintSource::ProxyNonRelay.to_string(), "proxy_non_relay");
}
