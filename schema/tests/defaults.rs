//! Every schema type that has both a `Default` and an empty authored form
//! gets the same value from both: `HostPolicy::default()` is what an empty
//! `palisade.toml` means, section by section and field by field, so a
//! policy built in code from `Default` is never looser than the file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use palisade_schema::Filters;
use palisade_schema::host_policy::{
    self, CustomProfile, Egress, EgressLimits, HostPolicy, Outward, RelayLimits, Taint, Worker,
    WorkerEnv, WorkerLimits,
};

fn policy(text: &str) -> HostPolicy {
    match host_policy::parse("p.toml", text) {
        Ok(p) => p.into_value(),
        Err(d) => panic!("{text:?} is refused: {d}"),
    }
}

/// Compares two policies one field at a time, so a difference names the field.
fn assert_same(parsed: &HostPolicy, default: &HostPolicy, text: &str) {
    let e = (&parsed.egress, &default.egress);
    assert_eq!(e.0.allow, e.1.allow, "{text:?}: egress.allow");
    assert_eq!(e.0.deny, e.1.deny, "{text:?}: egress.deny");
    assert_eq!(
        e.0.allow_addresses, e.1.allow_addresses,
        "{text:?}: egress.allow_addresses"
    );
    assert_eq!(e.0.limits, e.1.limits, "{text:?}: egress.limits");
    assert_eq!(e.0.relays, e.1.relays, "{text:?}: egress.relays");
    assert_eq!(
        e.0.require_sni_match, e.1.require_sni_match,
        "{text:?}: egress.require_sni_match"
    );
    assert_eq!(
        e.0.provider_hosts, e.1.provider_hosts,
        "{text:?}: egress.provider_hosts"
    );
    let w = (&parsed.worker, &default.worker);
    assert_eq!(w.0.profile, w.1.profile, "{text:?}: worker.profile");
    assert_eq!(
        w.0.custom_profile, w.1.custom_profile,
        "{text:?}: worker.custom_profile"
    );
    assert_eq!(w.0.cwd, w.1.cwd, "{text:?}: worker.cwd");
    assert_eq!(w.0.writable, w.1.writable, "{text:?}: worker.writable");
    assert_eq!(w.0.read_only, w.1.read_only, "{text:?}: worker.read_only");
    assert_eq!(w.0.masks, w.1.masks, "{text:?}: worker.masks");
    assert_eq!(w.0.env, w.1.env, "{text:?}: worker.env");
    assert_eq!(w.0.limits, w.1.limits, "{text:?}: worker.limits");
    let o = (&parsed.outward, &default.outward);
    assert_eq!(o.0.default, o.1.default, "{text:?}: outward.default");
    assert_eq!(o.0.allow, o.1.allow, "{text:?}: outward.allow");
    assert_eq!(o.0.deny, o.1.deny, "{text:?}: outward.deny");
    let t = (&parsed.taint, &default.taint);
    assert_eq!(t.0.sources, t.1.sources, "{text:?}: taint.sources");
    assert_eq!(
        t.0.untrusted_paths, t.1.untrusted_paths,
        "{text:?}: taint.untrusted_paths"
    );
    assert_eq!(t.0.marked, t.1.marked, "{text:?}: taint.marked");
    assert_eq!(t.0.marks_file, t.1.marks_file, "{text:?}: taint.marks_file");
    assert_eq!(
        t.0.steering_paths, t.1.steering_paths,
        "{text:?}: taint.steering_paths"
    );
    assert_eq!(
        t.0.egress_allow, t.1.egress_allow,
        "{text:?}: taint.egress_allow"
    );
    assert_eq!(t.0.observe, t.1.observe, "{text:?}: taint.observe");
    assert_eq!(parsed.routing, default.routing, "{text:?}: routing");
    assert_eq!(parsed.profiles, default.profiles, "{text:?}: profiles");
    // And as a whole, so a field added later and missed above still counts.
    assert_eq!(parsed, default, "{text:?}");
}

#[test]
fn host_policy_default_is_the_empty_file() {
    for text in [
        "",
        "\n# nothing configured\n",
        "[worker]\n[worker.env]\n[worker.limits]\n[egress]\n[egress.limits]\n[outward]\n[taint]\n",
        "[egress.provider_hosts]\n",
    ] {
        assert_same(&policy(text), &HostPolicy::default(), text);
    }
    // The defaults are the safe ones, not merely equal.
    assert!(HostPolicy::default().egress.require_sni_match);
    assert!(Egress::default().require_sni_match);
}

#[test]
fn every_section_default_is_its_empty_table() {
    assert_eq!(policy("[worker]").worker, Worker::default());
    assert_eq!(policy("[worker.env]").worker.env, WorkerEnv::default());
    assert_eq!(
        policy("[worker.limits]").worker.limits,
        WorkerLimits::default()
    );
    assert_eq!(policy("[egress]").egress, Egress::default());
    assert_eq!(
        policy("[egress.limits]").egress.limits,
        EgressLimits::default()
    );
    assert_eq!(policy("[outward]").outward, Outward::default());
    assert_eq!(policy("[taint]").taint, Taint::default());
    let custom = policy("[profiles.ci]\nbase = \"governed\"\n");
    assert_eq!(custom.profiles["ci"], CustomProfile::default());
    let relay = policy(
        "[[egress.relay]]\nname = \"api\"\norigin = \"https://api.example.com\"\nroutes = [\"POST /v1/x\"]\ncredential = { header = \"authorization\", from_env = \"API_KEY\" }\nlimits = {}\n",
    );
    assert_eq!(relay.egress.relays[0].limits, RelayLimits::default());
}

#[test]
fn a_non_default_value_is_seen() {
    // Positive control: the comparisons above can fail.
    let p = policy("[egress]\nrequire_sni_match = false\n");
    assert_ne!(p, HostPolicy::default());
    assert_ne!(p.egress, Egress::default());
    let p = policy("[taint]\nsources = [\"shell\"]\n");
    assert_ne!(p.taint, Taint::default());
    let p = policy("[taint]\nobserve = \"self_report\"\n");
    assert_ne!(p.taint, Taint::default());
    let p = policy("[egress.provider_hosts]\nx = [\"llm.example\"]\n");
    assert_ne!(p.egress, Egress::default());
}

#[test]
fn empty_filters_are_the_default_filters() {
    let text = "environments:\n  - {name: project, kind: daemon, daemon: host, cwd: /w}\ntriggers:\n  - name: t\n    on: manual.run\n    max_runtime: 10m\n    filters: {}\n    steps:\n      - id: s\n        environment: project\n        max_runtime: 5m\n        idle_timeout: 1m\n        agent: {provider: codex}\n        prompt: [{text: hi}]\n";
    let config = palisade_schema::parse_workflow("w.yml", text)
        .unwrap()
        .into_value();
    assert_eq!(config.triggers[0].filters, Some(Filters::default()));
    // Positive control: a set filter differs from the default.
    let set = text.replace("filters: {}", "filters: {pattern: \"!go\"}");
    let config = palisade_schema::parse_workflow("w.yml", &set)
        .unwrap()
        .into_value();
    assert_ne!(config.triggers[0].filters, Some(Filters::default()));
}
