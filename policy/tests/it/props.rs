//! Property tests (a)–(g) of issue 3 and the differential test against
//! [`crate::naive`].

use palisade_policy::admission::{Filters, TriggerEvent, admit};
use palisade_policy::capability::{
    Availability, Capability, CapabilityRegistry, OutputContext, ToolSpec,
};
use palisade_policy::derive::{OutputDecl, derive};
use palisade_policy::grant::{GrantConfig, StepInput, grant_step};
use palisade_policy::translate::{OpenCodeOrdering, TranslateRequest, translate};
use palisade_policy::webhook::{__sign, verify_github, verify_slack};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const TYPES: &[&str] = &[
    "slack.reply",
    "discord.reply",
    "github.reply",
    "manual.reply",
    "future.publish",
    "linear.progress",
];
const CONTEXTS: &[Option<&str>] = &[
    Some("slack"),
    Some("discord"),
    Some("github"),
    Some("manual"),
    None,
];
const PROVIDERS: &[&str] = &[
    "claude",
    "codex",
    "opencode",
    "claude/opus",
    "codex/gpt-5",
    "opencode/x/y",
    "gemini",
    "claudex",
];
const NAMES: &[&str] = &[
    "Read",
    "Bash",
    "Edit",
    "mcp__hub__reply",
    "mcp__hub__finish_execution",
    "mcp__other__x",
];
const ACTIONS: &[&str] = &["ask", "allow", "deny"];
const OC_KEYS: &[&str] = &[
    "read",
    "edit",
    "bash",
    "webfetch",
    "external_directory",
    "hub_reply",
    "hub_finish_execution",
];

fn decl() -> impl Strategy<Value = OutputDecl> {
    // `max: None` (unlimited) is what a trigger document's automatic reply has.
    (prop::sample::select(TYPES), 0u32..5, any::<bool>()).prop_map(|(t, max, required)| {
        OutputDecl {
            kind: t.to_owned(),
            max: (max < 4).then_some(max.max(1)),
            required,
        }
    })
}

fn decls() -> impl Strategy<Value = Vec<OutputDecl>> {
    prop::collection::vec(decl(), 0..5)
}

fn ctx() -> impl Strategy<Value = Option<OutputContext>> {
    prop::sample::select(CONTEXTS).prop_map(|c| c.map(OutputContext::new))
}

/// The production registry plus optional extra capabilities with their own tools.
fn registry() -> impl Strategy<Value = CapabilityRegistry> {
    any::<bool>().prop_map(|extra| {
        let mut reg = CapabilityRegistry::default();
        if extra {
            reg.register(Capability {
                kind: "linear.progress".into(),
                tool: ToolSpec {
                    name: "progress".into(),
                    ..ToolSpec::reply()
                },
                availability: Availability::Always,
            })
            .unwrap();
        }
        reg
    })
}

fn names() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::vec(prop::sample::select(NAMES).prop_map(|s| json!(s)), 0..4)
}

fn claude_options() -> impl Strategy<Value = Value> {
    (
        prop::option::of(names()),
        prop::option::of(names()),
        prop::option::of(names()),
        any::<bool>(),
    )
        .prop_map(|(allowed, disallowed, deny, sandbox)| {
            let mut m = Map::new();
            if let Some(a) = allowed {
                m.insert("allowedTools".into(), Value::Array(a));
            }
            if let Some(d) = disallowed {
                m.insert("disallowedTools".into(), Value::Array(d));
            }
            if let Some(d) = deny {
                m.insert("settings".into(), json!({"permissions": {"deny": d}}));
            }
            if sandbox {
                m.insert(
                    "sandbox".into(),
                    json!({"enabled": true, "failIfUnavailable": true}),
                );
            }
            Value::Object(m)
        })
}

fn codex_options() -> impl Strategy<Value = Value> {
    (any::<bool>(), any::<bool>()).prop_map(|(ro, other)| {
        let mut m = Map::new();
        m.insert("approval_policy".into(), json!("never"));
        m.insert(
            "sandbox_mode".into(),
            json!(if ro { "read-only" } else { "workspace-write" }),
        );
        if other {
            m.insert(
                "mcp_servers".into(),
                json!({"other": {"url": "http://127.0.0.1/o"}}),
            );
        }
        Value::Object(m)
    })
}

fn action() -> impl Strategy<Value = Value> {
    prop::sample::select(ACTIONS).prop_map(|a| json!(a))
}

fn opencode_options() -> impl Strategy<Value = Value> {
    let rule = prop_oneof![
        action(),
        prop::collection::vec(
            (
                prop::sample::select(&["*", "git status", "src/**"][..]),
                action()
            ),
            1..3
        )
        .prop_map(|ps| { Value::Object(ps.into_iter().map(|(p, a)| (p.to_owned(), a)).collect()) }),
    ];
    prop_oneof![
        action().prop_map(|a| json!({ "permission": a })),
        prop::collection::vec((prop::sample::select(OC_KEYS), rule), 0..4).prop_map(|rules| {
            json!({"permission": Value::Object(rules.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())})
        }),
    ]
}

fn options_for(provider: &'static str) -> BoxedStrategy<Option<Value>> {
    let base = provider.split('/').next().unwrap();
    match base {
        "claude" => prop::option::of(claude_options()).boxed(),
        "codex" => prop::option::of(codex_options()).boxed(),
        "opencode" => prop::option::of(opencode_options()).boxed(),
        _ => prop::option::of(claude_options()).boxed(),
    }
}

fn provider_and_options() -> impl Strategy<Value = (&'static str, Option<Value>)> {
    prop::sample::select(PROVIDERS).prop_flat_map(|p| (Just(p), options_for(p)))
}

fn ordering() -> impl Strategy<Value = OpenCodeOrdering> {
    prop_oneof![
        Just(OpenCodeOrdering::GrantsFirst),
        Just(OpenCodeOrdering::GrantsLast)
    ]
}

fn tool_names(d: &palisade_policy::derive::Derived) -> Vec<String> {
    d.policy.tool_names().map(str::to_owned).collect()
}

fn strings(v: Option<&Value>) -> Vec<Value> {
    v.and_then(Value::as_array).cloned().unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) `finish_execution` appears exactly once and first.
    #[test]
    fn a_finish_execution_once_and_first(ds in decls(), c in ctx(), reg in registry()) {
        if let Ok(d) = derive(&ds, c.as_ref(), None, &reg) {
            let tools = tool_names(&d);
            prop_assert_eq!(tools[0].as_str(), "finish_execution");
            prop_assert_eq!(tools.iter().filter(|t| *t == "finish_execution").count(), 1);
            prop_assert!(d.policy.preapproved.iter().all(|r| r.server == "hub"));
        }
    }

    /// (b) The tool set is within `finish_execution` plus the tools of declared, available capabilities.
    #[test]
    fn b_tools_come_only_from_declared_available_capabilities(ds in decls(), c in ctx(), reg in registry()) {
        if let Ok(d) = derive(&ds, c.as_ref(), None, &reg) {
            let allowed: Vec<String> = ds.iter()
                .filter(|x| reg.is_available(&x.kind, c.as_ref()))
                .filter_map(|x| reg.get(&x.kind).map(|cap| cap.tool.name.clone()))
                .collect();
            for t in tool_names(&d).iter().skip(1) {
                prop_assert!(allowed.contains(t), "{} not declared and available", t);
            }
            let mut dedup = tool_names(&d);
            dedup.dedup();
            prop_assert_eq!(dedup.len(), d.policy.preapproved.len());
        }
    }

    /// (c) Adding a declaration never removes a tool; removing one never adds one.
    #[test]
    fn c_monotone_in_declarations(ds in decls(), extra in decl(), at in 0usize..6, c in ctx(), reg in registry()) {
        let mut more = ds.clone();
        more.insert(at.min(ds.len()), extra);
        let fewer = derive(&ds, c.as_ref(), None, &reg);
        let grown = derive(&more, c.as_ref(), None, &reg);
        if let Ok(g) = &grown {
            // Removing a declaration from a dispatchable step keeps it dispatchable.
            let f = fewer.as_ref().expect("removing a declaration made dispatch fail");
            for t in tool_names(f) {
                prop_assert!(tool_names(g).contains(&t), "adding a declaration removed {}", t);
            }
        }
    }

    /// (d) Translation is idempotent and never removes or weakens an authored deny.
    #[test]
    fn d_translation_idempotent_and_keeps_denies(
        (provider, options) in provider_and_options(),
        ds in decls(), c in ctx(), ord in ordering(),
    ) {
        let reg = CapabilityRegistry::default();
        let Ok(d) = derive(&ds, c.as_ref(), None, &reg) else { return Ok(()) };
        let req = |o: Option<&Value>| translate(&TranslateRequest {
            provider, options: o, policy: &d.policy, mcp_servers: &["hub"], opencode_ordering: ord,
        });
        let Ok(once) = req(options.as_ref()) else { return Ok(()) };
        let twice = req(once.as_ref()).unwrap();
        prop_assert_eq!(&once, &twice);
        let once = once.unwrap();
        match provider.split('/').next().unwrap() {
            "claude" => {
                let authored = options.clone().unwrap_or(json!({}));
                prop_assert_eq!(once.get("disallowedTools"), authored.get("disallowedTools"));
                prop_assert_eq!(once.get("settings"), authored.get("settings"));
                let allowed = strings(once.get("allowedTools"));
                for a in strings(authored.get("allowedTools")) {
                    prop_assert!(allowed.contains(&a));
                }
            }
            "opencode" => {
                let rules = strings(once.get("permission"));
                let n_grants = d.policy.preapproved.len();
                let is_grant = |r: &Value| r["action"] == "allow"
                    && r["pattern"] == "*"
                    && d.policy.tool_names().any(|t| r["permission"] == format!("hub_{t}"));
                // Every authored ask/deny survives.
                let authored = naive_rules(options.as_ref());
                for r in authored.iter().filter(|r| r["action"] != "allow") {
                    prop_assert!(rules.contains(r), "authored rule {} dropped", r);
                }
                if ord == OpenCodeOrdering::GrantsFirst {
                    // Grants come first, so under last-match-wins every authored rule still decides.
                    prop_assert!(rules.iter().take(n_grants).all(is_grant));
                    prop_assert!(rules.iter().skip(n_grants).all(|r| !is_grant(r)));
                }
            }
            _ => {}
        }
    }

    /// (e) The result does not depend on unrelated fields: the model part of
    /// the provider id or option keys that translation does not write.
    #[test]
    fn e_unrelated_fields_do_not_matter(
        ds in decls(), c in ctx(), model in "[a-z0-9-]{1,8}", key in "[a-z]{3,8}", val in any::<i32>(),
        base in prop::sample::select(&["claude", "codex", "opencode"][..]),
    ) {
        prop_assume!(!["allowedTools", "mcp_servers", "permission"].contains(&key.as_str()));
        let reg = CapabilityRegistry::default();
        let cfg = GrantConfig::default();
        let plain = json!({});
        let noisy = json!({ key.clone(): val });
        let with_model = format!("{base}/{model}");
        let run = |provider: &str, options: &Value| grant_step(&StepInput {
            provider, options: Some(options), allow_outputs: &ds, output_schema: None,
        }, c.as_ref(), &reg, &cfg);
        match (run(base, &plain), run(&with_model, &noisy)) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(&a.derived, &b.derived);
                let mut b_opts = b.provider_options.clone().unwrap();
                prop_assert_eq!(b_opts.as_object_mut().unwrap().remove(&key), Some(json!(val)));
                prop_assert_eq!(a.provider_options.clone().unwrap(), b_opts);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "{:?} vs {:?}", a, b),
        }
    }

    /// Differential: the real derive + translate agree with the naive reference.
    #[test]
    fn differential_against_naive_reference(
        (provider, options) in provider_and_options(),
        ds in decls(), c in prop::sample::select(CONTEXTS), ord in ordering(),
    ) {
        let reg = CapabilityRegistry::default();
        let cfg = GrantConfig::default().with_opencode_ordering(ord);
        let ctx = c.map(OutputContext::new);
        let real = grant_step(&StepInput {
            provider, options: options.as_ref(), allow_outputs: &ds, output_schema: None,
        }, ctx.as_ref(), &reg, &cfg);
        let naive_decls: Vec<crate::naive::Decl> = ds.iter().map(|d| (d.kind.clone(), d.max, d.required)).collect();
        let naive = crate::naive::derive(&naive_decls, c)
            .map_err(|m| ("required_output_capability_unavailable".to_owned(), m))
            .and_then(|tools| {
                let opts = crate::naive::translate(provider, options.as_ref(), &tools, ord == OpenCodeOrdering::GrantsFirst)?;
                Ok((tools, opts))
            });
        match (real, naive) {
            (Ok(g), Ok((tools, opts))) => {
                prop_assert_eq!(tool_names(&g.derived), tools);
                prop_assert_eq!(g.provider_options, opts);
            }
            (Err(e), Err((code, message))) => {
                prop_assert_eq!(e.code(), code.as_str());
                prop_assert_eq!(e.to_string(), message);
            }
            (r, n) => prop_assert!(false, "real {:?} vs naive {:?}", r, n),
        }
    }
}

fn naive_rules(options: Option<&Value>) -> Vec<Value> {
    match crate::naive::translate("opencode", options, &[], false) {
        Ok(Some(v)) => strings(v.get("permission")),
        _ => Vec::new(),
    }
}

// ---- (f) admission monotonicity ----

/// The generators of (f) must admit a fair share of events, or (f) checks nothing.
#[test]
fn f_generators_admit_often_enough() {
    use proptest::strategy::ValueTree as _;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut n_admitted = 0;
    for _ in 0..2000 {
        let f = filters().new_tree(&mut runner).unwrap().current();
        let e = event().new_tree(&mut runner).unwrap().current();
        let f = applicable(f, &e.name);
        n_admitted += usize::from(admit(&e.name.clone(), Some(&f), &e).is_admitted());
    }
    assert!(
        n_admitted >= 100,
        "only {n_admitted} of 2000 generated events were admitted"
    );
}

fn opt_pick(pool: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(pool).prop_map(str::to_owned))
}

fn vec_pick(pool: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<String>>> {
    prop::option::of(prop::collection::vec(
        prop::sample::select(pool).prop_map(str::to_owned),
        0..3,
    ))
}

const EVENTS: &[&str] = &[
    "slack.mention",
    "discord.mention",
    "github.issue_comment",
    "manual.run",
];
// Pools repeat the value events usually carry, so that filters often match and
// the monotonicity property is exercised on admitted events, not only rejections.
const USERS: &[&str] = &["U1", "ana", "ana", "U1", "eve"];
const WORDS: &[&str] = &["deploy", "fix", "@bot"];
const CHANNELS: &[&str] = &["C1", "C1", "C2", "C3"];
const LABELS: &[&str] = &["bug", "Café", "Cafe"];

fn filters() -> impl Strategy<Value = Filters> {
    (
        (
            opt_pick(WORDS),
            opt_pick(WORDS),
            opt_pick(LABELS),
            vec_pick(LABELS),
        ),
        (
            opt_pick(&["o/r", "o/r", "o/s"]),
            opt_pick(&["G1", "G1", "G2"]),
            opt_pick(&["T1", "T1", "T2"]),
            vec_pick(CHANNELS),
        ),
        (
            prop::option::weighted(
                0.9,
                prop::collection::vec(prop::sample::select(USERS).prop_map(str::to_owned), 0..3),
            ),
            prop::option::of(prop::collection::vec(
                (
                    Just("env".to_owned()),
                    prop::sample::select(&["prod", "prod", "dev"][..]).prop_map(|s| json!(s)),
                ),
                0..2,
            )),
            opt_pick(&["a", "a", "b"]),
        ),
    )
        .prop_map(
            |(
                (pattern, contains, label, labels),
                (repo, guild, workspace, channels),
                (from_users, inputs, connection),
            )| {
                let mut f = Filters::default();
                f.pattern = pattern;
                f.contains = contains;
                f.label = label;
                f.labels = labels;
                f.repo = repo;
                f.guild = guild;
                f.workspace = workspace;
                f.channels = channels;
                f.from_users = from_users;
                f.inputs = inputs;
                f.connection = connection;
                f
            },
        )
}

fn event() -> impl Strategy<Value = TriggerEvent> {
    (
        (
            prop::sample::select(EVENTS),
            prop::sample::select(&["U1", "U1", "u2"][..]),
            prop::sample::select(&["ana", "ana", "bob"][..]),
            prop::bool::weighted(0.1),
        ),
        (
            prop::sample::select(&["C1", "C1", "C2"][..]),
            prop::sample::select(&["C2", "C3"][..]),
        ),
        (
            prop::collection::vec(
                prop::sample::select(&["deploy", "fix", "@bot", "x"][..]),
                0..4,
            ),
            prop::bool::weighted(0.9),
            opt_pick(LABELS),
            prop::collection::vec(prop::sample::select(LABELS).prop_map(str::to_owned), 0..3),
            prop::sample::select(&["prod", "dev"][..]),
        ),
    )
        .prop_map(
            |(
                (name, actor_id, actor_name, actor_is_bot),
                (channel, parent),
                (words, mentioned, label, labels, env),
            )| {
                let mut e = TriggerEvent::default();
                e.name = name.to_owned();
                e.actor_id = Some(actor_id.to_owned());
                e.actor_name = Some(actor_name.to_owned());
                e.actor_is_bot = actor_is_bot;
                e.connection = Some("a".to_owned());
                e.workspace = Some("T1".to_owned());
                e.guild = Some("G1".to_owned());
                e.channel = Some(channel.to_owned());
                e.parent_channel = Some(parent.to_owned());
                e.repository = Some("o/r".to_owned());
                e.text = format!(
                    "{}{}",
                    if mentioned { "<@B> " } else { "" },
                    words.join(" ")
                );
                e.bot_mentions = vec!["<@B>".to_owned()];
                e.label = label;
                e.labels = labels;
                e.inputs = vec![("env".to_owned(), json!(env))];
                e
            },
        )
}

/// Drops the keys that `on`'s provider cannot match (they reject on their own,
/// which `admission`'s unit tests cover), so that admissions are frequent.
fn applicable(mut f: Filters, on: &str) -> Filters {
    let p = on.split('.').next().unwrap_or_default();
    if p != "github" {
        f.label = None;
        f.labels = None;
        f.repo = None;
    }
    if p != "discord" {
        f.guild = None;
    }
    if p != "slack" {
        f.workspace = None;
    }
    if p != "slack" && p != "discord" {
        f.channels = None;
    }
    if p == "manual" {
        f.pattern = None;
        f.contains = None;
    }
    f
}

/// Sets one condition (index `k`) from `extra`, if `base` lacks it.
///
/// `from_users` is an allowlist, not an optional condition: without it nobody
/// is admitted. Restricting it means listing fewer users, so index 8 drops a
/// listed user instead of adding the key.
fn add_condition(base: &Filters, extra: &Filters, k: usize) -> Filters {
    let mut f = base.clone();
    macro_rules! add {
        ($field:ident) => {
            if f.$field.is_none() {
                f.$field = extra.$field.clone();
            }
        };
    }
    match k % 11 {
        0 => add!(pattern),
        1 => add!(contains),
        2 => add!(label),
        3 => add!(labels),
        4 => add!(repo),
        5 => add!(guild),
        6 => add!(workspace),
        7 => add!(channels),
        8 => {
            if let Some(users) = &mut f.from_users {
                users.pop();
            }
        }
        9 => add!(inputs),
        _ => add!(connection),
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// (f) A filter with more conditions never admits more events.
    #[test]
    fn f_more_conditions_never_admit_more(base in filters(), extra in filters(), e in event(), on_same in prop::bool::weighted(0.9)) {
        let on = if on_same { e.name.clone() } else { "slack.mention".to_owned() };
        let base = applicable(base, &on);
        let base_admits = admit(&on, Some(&base), &e).is_admitted();
        // Every single added condition, then all of them at once.
        let mut all = base.clone();
        for k in 0..11 {
            let more = applicable(add_condition(&base, &extra, k), &on);
            if admit(&on, Some(&more), &e).is_admitted() {
                prop_assert!(base_admits, "condition {} admitted what fewer conditions rejected", k);
            }
            all = applicable(add_condition(&all, &extra, k), &on);
        }
        if admit(&on, Some(&all), &e).is_admitted() {
            prop_assert!(base_admits, "more conditions admitted what fewer rejected");
        }
        // Without filters (hence without from_users) nothing is admitted.
        prop_assert!(!admit(&on, None, &e).is_admitted());
    }

    /// (g) A forged or stale webhook signature is never accepted.
    #[test]
    fn g_forged_or_stale_signatures_rejected(
        secret in prop::collection::vec(any::<u8>(), 1..48),
        body in prop::collection::vec(any::<u8>(), 0..256),
        flip in any::<prop::sample::Index>(), bit in 0u8..8,
        ts in 1_000_000_000i64..2_000_000_000, skew in -1000i64..1000,
        other in prop::collection::vec(any::<u8>(), 1..48),
    ) {
        // GitHub: the genuine signature verifies (positive control) ...
        let sig = __sign::github(&secret, &body);
        prop_assert!(verify_github(&secret, &body, Some(&sig)).is_ok());
        // ... a flipped bit in the body or the signature does not ...
        if !body.is_empty() {
            let mut b = body.clone();
            let i = flip.index(b.len());
            b[i] ^= 1 << bit;
            prop_assert!(verify_github(&secret, &b, Some(&sig)).is_err());
        }
        let mut s = sig.clone().into_bytes();
        let i = 7 + flip.index(s.len() - 7);
        s[i] = if s[i] == b'0' { b'1' } else { b'0' };
        prop_assert!(verify_github(&secret, &body, Some(std::str::from_utf8(&s).unwrap())).is_err());
        // ... nor one made with another secret.
        if other != secret {
            prop_assert!(verify_github(&other, &body, Some(&__sign::github(&other, &body))).is_ok());
            prop_assert!(verify_github(&secret, &body, Some(&__sign::github(&other, &body))).is_err());
        }
        // Slack: accepted iff the signature is genuine and the timestamp is within 5 minutes.
        let ts_s = ts.to_string();
        let ssig = __sign::slack(&secret, &ts_s, &body);
        let now = ts + skew;
        let res = verify_slack(&secret, &body, Some(&ts_s), Some(&ssig), now);
        prop_assert_eq!(res.is_ok(), skew.abs() <= 300);
        let forged = __sign::slack(&other, &ts_s, &body);
        if other != secret {
            prop_assert!(verify_slack(&secret, &body, Some(&ts_s), Some(&forged), ts).is_err());
        }
        // A signature for one timestamp does not verify under another.
        let ts2 = (ts + 1).to_string();
        prop_assert!(verify_slack(&secret, &body, Some(&ts2), Some(&ssig), ts).is_err());
    }
}

// ---- differential on generated workflow text, parsed by palisade-schema ----

const OC_VALID_KEYS: &[&str] = &[
    "read",
    "edit",
    "bash",
    "webfetch",
    "external_directory",
    "glob",
];

/// Options that pass the strict provider schemas.
fn valid_options_for(provider: &'static str) -> BoxedStrategy<Option<Value>> {
    match provider.split('/').next().unwrap() {
        "claude" => prop::option::of(claude_options()).boxed(),
        "codex" => prop::option::of(
            (any::<bool>(), prop::sample::select(&["disabled", "cached", "live"][..])).prop_map(|(ro, ws)| {
                json!({"approval_policy": "never", "sandbox_mode": if ro { "read-only" } else { "workspace-write" }, "web_search": ws})
            }),
        )
        .boxed(),
        "opencode" => {
            let rule = prop_oneof![
                action(),
                prop::collection::vec((prop::sample::select(&["git status", "src/**", "*"][..]), action()), 1..3)
                    .prop_map(|ps| Value::Object(ps.into_iter().map(|(p, a)| (p.to_owned(), a)).collect())),
            ];
            prop::option::of(prop_oneof![
                action().prop_map(|a| json!({ "permission": a })),
                prop::collection::vec((prop::sample::select(OC_VALID_KEYS), rule, action()), 0..4).prop_map(|rules| {
                    // `webfetch` takes an action only (spec §8.3); the others take a rule.
                    let rules = rules.into_iter().map(|(k, r, a)| (k.to_owned(), if k == "webfetch" { a } else { r }));
                    json!({"permission": Value::Object(rules.collect())})
                }),
            ])
            .boxed()
        }
        _ => Just(None).boxed(),
    }
}

/// `(provider, options, declarations)` of one generated step.
type GenStep = (&'static str, Option<Value>, Vec<crate::naive::Decl>);

fn generated_step() -> impl Strategy<Value = GenStep> {
    let decl = (
        prop::sample::select(&["slack.reply", "discord.reply", "future.publish"][..]),
        1u32..4,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(t, m, r)| (t.to_owned(), Some(m), r));
    prop::sample::select(PROVIDERS).prop_flat_map(move |p| {
        (
            Just(p),
            valid_options_for(p),
            prop::collection::vec(decl.clone(), 0..3),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The whole pipeline from workflow text: `palisade-schema` parses a
    /// generated workflow, `plan::grant_for` grants each step, and the naive
    /// reference, fed the generated data directly, agrees.
    #[test]
    fn differential_on_generated_workflow_text(
        steps in prop::collection::vec(generated_step(), 1..4),
        on in prop::sample::select(&["slack.mention", "discord.mention"][..]),
        c in prop::sample::select(CONTEXTS), ord in ordering(),
    ) {
        let step_docs: Vec<Value> = steps.iter().enumerate().map(|(i, (provider, options, decls))| {
            let mut agent = json!({"provider": provider});
            if let Some(o) = options {
                agent["options"] = o.clone();
            }
            json!({
                "id": format!("s{i}"), "environment": "dev", "max_runtime": "10m", "idle_timeout": "1m",
                "agent": agent, "prompt": [{"text": "go"}],
                "allow_outputs": decls.iter().map(|(t, m, r)| json!({"type": t, "max": m, "required": r})).collect::<Vec<_>>(),
            })
        }).collect();
        let doc = json!({
            "environments": [{"name": "dev", "kind": "daemon", "daemon": "d", "cwd": "/repo"}],
            "triggers": [{"name": "t", "on": on, "max_runtime": "1h", "filters": {"from_users": ["U1"]}, "steps": step_docs}],
        });
        let (config, diags) = match palisade_schema::parse_workflow("gen.yml", &serde_json::to_string_pretty(&doc).unwrap()) {
            Ok(parsed) => {
                let (config, warnings) = parsed.into_parts();
                (Some(config), warnings)
            }
            Err(refused) => (None, refused.into_vec()),
        };
        // A required output no registered capability can provide for this trigger is rejected while parsing.
        let statically_rejected = diags.iter().any(|d| d.is_error() && d.code == "required_output_unavailable");
        prop_assume!(!statically_rejected);
        // palisade-schema refuses a provider without exact MCP preapproval
        // while parsing only when it carries options the schema cannot check
        // (`unknown_provider`); without options the workflow loads (with an
        // `unsupported_provider` warning) and dispatch must refuse the step,
        // which the per-step comparison below checks against the reference.
        let schema_unsupported = diags.iter().any(|d| d.is_error() && d.code == "unknown_provider");
        let naive_unsupported_with_options = steps.iter().any(|(p, o, _)| {
            o.is_some()
                && matches!(crate::naive::translate(p, None, &["finish_execution".to_owned()], true), Err((code, _)) if code == "tool_policy_unsupported")
        });
        prop_assert_eq!(schema_unsupported, naive_unsupported_with_options);
        if schema_unsupported {
            return Ok(());
        }
        let config = config.unwrap_or_else(|| panic!("generated workflow does not parse: {diags:#?}"));
        let reg = CapabilityRegistry::default();
        let cfg = GrantConfig::default().with_opencode_ordering(ord);
        let ctx = c.map(OutputContext::new);
        for (step, (provider, options, decls)) in config.triggers[0].steps.iter().zip(&steps) {
            let agent = palisade_policy::plan::static_agent(&config, step).unwrap().agent;
            let real = palisade_policy::plan::grant_for(step, &agent, ctx.as_ref(), &reg, &cfg);
            let naive = crate::naive::derive(decls, c)
                .map_err(|m| ("required_output_capability_unavailable".to_owned(), m))
                .and_then(|tools| Ok((tools.clone(), crate::naive::translate(provider, options.as_ref(), &tools, ord == OpenCodeOrdering::GrantsFirst)?)));
            match (real, naive) {
                (Ok(g), Ok((tools, opts))) => {
                    prop_assert_eq!(tool_names(&g.derived), tools);
                    prop_assert_eq!(g.provider_options, opts);
                }
                (Err(e), Err((code, message))) => {
                    prop_assert_eq!(e.code(), code.as_str());
                    prop_assert_eq!(e.to_string(), message);
                }
                (r, n) => prop_assert!(false, "real {:?} vs naive {:?}", r, n),
            }
        }
    }
}

// ---- output ledger against a model ----

#[derive(Clone, Debug)]
enum LedgerOp {
    /// Call a tool; `ok` says whether the outbound call then succeeds.
    Call {
        tool: &'static str,
        ok: bool,
    },
    Finish,
}

/// The ledger model's entry: `(type, tool, max (None: unlimited), required, attempts, emitted)`.
type ModelEntry = (String, Option<String>, Option<u32>, bool, u32, u32);

fn ledger_op() -> impl Strategy<Value = LedgerOp> {
    prop_oneof![
        4 => (prop::sample::select(&["reply", "progress", "nope"][..]), prop::bool::weighted(0.7))
            .prop_map(|(tool, ok)| LedgerOp::Call { tool, ok }),
        1 => Just(LedgerOp::Finish),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The ledger agrees with a model: attempts never exceed the first
    /// declaration's `max`, finish succeeds exactly when every required type
    /// was emitted, and nothing is accepted after a successful finish.
    #[test]
    fn ledger_agrees_with_a_model(ds in decls(), c in ctx(), reg in registry(), ops in prop::collection::vec(ledger_op(), 0..12)) {
        use palisade_policy::ledger::{LedgerError, OutputLedger};
        let mut ledger = OutputLedger::new(&ds, c.as_ref(), &reg);
        // Model: per type (first declaration wins max; any declaration makes it required).
        let mut types: Vec<ModelEntry> = Vec::new();
        for d in &ds {
            if let Some(t) = types.iter_mut().find(|t| t.0 == d.kind) {
                t.3 |= d.required;
                continue;
            }
            let tool = reg.get(&d.kind).filter(|cap| cap.availability.is_available(c.as_ref())).map(|cap| cap.tool.name.clone());
            types.push((d.kind.clone(), tool, d.max, d.required, 0, 0));
        }
        let mut finished = false;
        for op in ops {
            match op {
                LedgerOp::Call { tool, ok } => {
                    let res = ledger.reserve_tool(tool);
                    let entry = types.iter_mut().find(|t| t.1.as_deref() == Some(tool));
                    match (finished, entry) {
                        (true, _) => prop_assert_eq!(res, Err(LedgerError::Finished)),
                        (false, None) => prop_assert_eq!(res, Err(LedgerError::ToolNotFound { tool: tool.to_owned() })),
                        (false, Some(t)) if t.2.is_some_and(|max| t.4 >= max) => prop_assert_eq!(res, Err(LedgerError::LimitReached { kind: t.0.clone() })),
                        (false, Some(t)) => {
                            let r = res.unwrap();
                            prop_assert_eq!(r.kind(), t.0.as_str());
                            t.4 += 1;
                            if ok {
                                t.5 += 1;
                                ledger.record(r);
                            }
                        }
                    }
                }
                LedgerOp::Finish => {
                    let res = ledger.finish();
                    if finished {
                        prop_assert_eq!(res, Err(LedgerError::Finished));
                    } else if types.iter().any(|t| t.3 && t.5 == 0) {
                        let missing = matches!(res, Err(LedgerError::RequiredOutputMissing { .. }));
                        prop_assert!(missing, "expected a missing required output, got {:?}", res);
                    } else {
                        prop_assert_eq!(res, Ok(()));
                        finished = true;
                    }
                }
            }
        }
        for t in &types {
            prop_assert_eq!(ledger.attempts(&t.0), t.4);
            prop_assert_eq!(ledger.emitted(&t.0), t.5);
            prop_assert!(t.2.is_none_or(|max| t.4 <= max));
        }
    }
}
