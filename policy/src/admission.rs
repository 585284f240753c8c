//! Trigger admission: does an incoming event start a trigger's run?
//!
//! [`admit`] is total: it returns [`Admission::Admitted`] with the prompt text,
//! or [`Admission::Rejected`] with a stable code and a reason. The per-provider
//! semantics follow the Hub (spec §1.5):
//!
//! - Slack: `filters` must be present; the bot must be mentioned and the
//!   author must not be a bot; `from_users` matches the author id or name;
//!   `workspace`, `channels`; `pattern`/`contains` are **prefixes** of the text
//!   after the mention, ending at whitespace or the end of the text.
//! - Discord: as Slack, with `guild` and `channels` matching the channel or
//!   its parent channel.
//! - GitHub: `from_users` matches the actor login; `repo` is `owner/name`;
//!   `pattern` is a prefix, `contains` a substring; `label` is the changed
//!   label (accent-insensitive); `labels` must all be present.
//! - Manual: the actor must be listed in `from_users`, else `actor_forbidden`.
//! - All: each filter `inputs` entry equals the invocation input.
//!
//! Fail-closed choices where palisade is stricter than the Hub, so that
//! adding a condition never admits more events:
//! - `from_users` is required for every provider; an empty or missing list admits nobody.
//! - When both `pattern` and `contains` are given, both must hold (the Hub
//!   checks only `pattern` for Slack and Discord).
//! - A filter key that the event's provider cannot match (e.g. `repo` on a
//!   Slack trigger) rejects the event instead of being ignored.
//! - An event from a bot is rejected for Discord as for Slack.

use serde_json::Value;
use unicode_normalization::UnicodeNormalization as _;

/// A trigger's filters (spec §1.5); every condition must pass. The parsed
/// model's type, so a trigger's filters are admitted as authored.
pub use palisade_schema::model::Filters;

/// An incoming event, as the caller parsed it from a verified webhook or a manual run.
///
/// Start from [`TriggerEvent::default`] (no actor, empty text) and set the
/// fields the event has; the struct may gain fields, so it cannot be
/// written as a literal outside this crate.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TriggerEvent {
    /// The event name, e.g. `slack.mention`, `github.issue_comment`, `manual.run`.
    pub name: String,
    /// The actor id (Slack/Discord user id; the manual-run actor).
    pub actor_id: Option<String>,
    /// The actor name (Slack/Discord username; GitHub login).
    pub actor_name: Option<String>,
    /// Whether the author is a bot (Slack/Discord).
    pub actor_is_bot: bool,
    /// The connection (slug) the event arrived on.
    pub connection: Option<String>,
    /// Slack workspace (team) id.
    pub workspace: Option<String>,
    /// Discord guild id.
    pub guild: Option<String>,
    /// Channel id.
    pub channel: Option<String>,
    /// Discord parent channel id (for threads).
    pub parent_channel: Option<String>,
    /// GitHub `owner/name`.
    pub repository: Option<String>,
    /// The message, comment or prompt text.
    pub text: String,
    /// The tokens that mention the bot (e.g. `<@U0BOT>`, a Discord role mention).
    pub bot_mentions: Vec<String>,
    /// GitHub: the label that was added by this event.
    pub label: Option<String>,
    /// GitHub: the labels the issue or pull request carries.
    pub labels: Vec<String>,
    /// Parsed invocation inputs.
    pub inputs: Vec<(String, Value)>,
}

/// Why an event was not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejection {
    /// Stable code, e.g. `actor_forbidden`.
    pub code: &'static str,
    /// A human reason; it never quotes the event text.
    pub message: String,
}

/// The admission decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The trigger runs; `prompt` is the text after the mention (Slack/Discord)
    /// or the whole text.
    Admitted {
        /// The prompt text (`paseo.prompt`).
        prompt: String,
    },
    /// The trigger does not run.
    Rejected(Rejection),
}

impl Admission {
    /// Whether the event was admitted.
    pub fn is_admitted(&self) -> bool {
        matches!(self, Self::Admitted { .. })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Slack,
    Discord,
    Github,
    Manual,
}

/// Decides whether `event` starts the trigger `on` with `filters`.
pub fn admit(on: &str, filters: Option<&Filters>, event: &TriggerEvent) -> Admission {
    match admit_inner(on, filters, event, false) {
        Ok(prompt) => Admission::Admitted { prompt },
        Err(r) => Admission::Rejected(r),
    }
}

/// [`admit`] as Paseo Hub 0.9 decides a trigger document's event
/// (`hub-triggers.md` §3.2): `"*"` as any element of `from_users` admits
/// every actor (v0.6 compares it as a literal id). An absent or empty
/// list still admits nobody; a manual document without a list is compiled
/// to `["*"]` before it gets here.
pub fn admit_0_9(on: &str, filters: Option<&Filters>, event: &TriggerEvent) -> Admission {
    match admit_inner(on, filters, event, true) {
        Ok(prompt) => Admission::Admitted { prompt },
        Err(r) => Admission::Rejected(r),
    }
}

fn reject(code: &'static str, message: impl Into<String>) -> Rejection {
    Rejection {
        code,
        message: message.into(),
    }
}

fn admit_inner(
    on: &str,
    filters: Option<&Filters>,
    event: &TriggerEvent,
    wildcard: bool,
) -> Result<String, Rejection> {
    if event.name != on {
        return Err(reject(
            "event_mismatch",
            format!("event `{}` does not start triggers on `{on}`", event.name),
        ));
    }
    let source = match on.split('.').next() {
        Some("slack") => Source::Slack,
        Some("discord") => Source::Discord,
        Some("github") => Source::Github,
        Some("manual") => Source::Manual,
        _ => {
            return Err(reject(
                "unsupported_event",
                format!("palisade cannot admit `{on}` events"),
            ));
        }
    };
    let empty = Filters::default();
    let f = match (filters, source) {
        (Some(f), _) => f,
        (None, Source::Manual) => &empty,
        (None, _) => {
            return Err(reject(
                "filters_required",
                "externally sourced events need trigger filters with from_users",
            ));
        }
    };
    check_applicable(f, source)?;
    let allowed = f.from_users.as_deref().unwrap_or_default();
    let everyone = wildcard && allowed.iter().any(|u| u == "*");
    if source == Source::Manual {
        let listed = everyone || event.actor_id.as_ref().is_some_and(|a| allowed.contains(a));
        if !listed {
            return Err(reject(
                "actor_forbidden",
                "manual run rejected: actor_forbidden",
            ));
        }
    } else {
        if allowed.is_empty() {
            return Err(reject(
                "from_users_required",
                "a non-empty filters.from_users allowlist is required for externally sourced events",
            ));
        }
        let by_id = source != Source::Github
            && event.actor_id.as_ref().is_some_and(|a| allowed.contains(a));
        let by_name = event
            .actor_name
            .as_ref()
            .is_some_and(|a| allowed.contains(a));
        if !(everyone || by_id || by_name) {
            return Err(reject(
                "user_not_allowed",
                "the event's author is not in filters.from_users",
            ));
        }
    }
    if let Some(c) = &f.connection
        && event.connection.as_ref() != Some(c)
    {
        return Err(reject(
            "connection_mismatch",
            format!("event did not arrive on connection `{c}`"),
        ));
    }
    if let Some(w) = &f.workspace
        && event.workspace.as_ref() != Some(w)
    {
        return Err(reject(
            "workspace_mismatch",
            format!("event is not from workspace `{w}`"),
        ));
    }
    if let Some(g) = &f.guild
        && event.guild.as_ref() != Some(g)
    {
        return Err(reject(
            "guild_mismatch",
            format!("event is not from guild `{g}`"),
        ));
    }
    if let Some(chs) = &f.channels {
        let in_channel = |c: &Option<String>| c.as_ref().is_some_and(|c| chs.contains(c));
        let ok = in_channel(&event.channel)
            || (source == Source::Discord && in_channel(&event.parent_channel));
        if !ok {
            return Err(reject(
                "channel_mismatch",
                "event is not from one of filters.channels",
            ));
        }
    }
    if let Some(r) = &f.repo
        && event.repository.as_ref() != Some(r)
    {
        return Err(reject(
            "repo_mismatch",
            format!("event is not from repository `{r}`"),
        ));
    }
    if let Some(l) = &f.label
        && event
            .label
            .as_ref()
            .is_none_or(|e| fold_accents(e) != fold_accents(l))
    {
        return Err(reject(
            "label_mismatch",
            format!("the event did not add label `{l}`"),
        ));
    }
    if let Some(ls) = &f.labels
        && let Some(missing) = ls.iter().find(|l| !event.labels.contains(l))
    {
        return Err(reject(
            "labels_missing",
            format!("label `{missing}` is not present"),
        ));
    }
    if let Some(inputs) = &f.inputs {
        for (name, want) in inputs {
            let got = event.inputs.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            if got != Some(want) {
                return Err(reject(
                    "input_mismatch",
                    format!("input `{name}` does not equal {want}"),
                ));
            }
        }
    }
    match source {
        Source::Slack | Source::Discord => {
            if event.actor_is_bot {
                return Err(reject(
                    "author_is_bot",
                    "events written by a bot do not start triggers",
                ));
            }
            let body = after_mention(&event.text, &event.bot_mentions)
                .ok_or_else(|| reject("not_mentioned", "the message does not mention the bot"))?;
            for (key, marker) in [("pattern", &f.pattern), ("contains", &f.contains)] {
                if let Some(m) = marker
                    && !starts_with_word(body, m)
                {
                    return Err(reject(
                        "pattern_mismatch",
                        format!(
                            "the text after the mention does not start with filters.{key} `{m}`"
                        ),
                    ));
                }
            }
            Ok(body.trim().to_owned())
        }
        Source::Github => {
            if let Some(p) = &f.pattern
                && !event.text.starts_with(p.as_str())
            {
                return Err(reject(
                    "pattern_mismatch",
                    format!("the text does not start with `{p}`"),
                ));
            }
            if let Some(c) = &f.contains
                && !event.text.contains(c.as_str())
            {
                return Err(reject(
                    "contains_mismatch",
                    format!("the text does not contain `{c}`"),
                ));
            }
            Ok(event.text.clone())
        }
        Source::Manual => Ok(event.text.clone()),
    }
}

fn check_applicable(f: &Filters, source: Source) -> Result<(), Rejection> {
    let present = [
        (
            "pattern",
            f.pattern.is_some(),
            !matches!(source, Source::Manual),
        ),
        (
            "contains",
            f.contains.is_some(),
            !matches!(source, Source::Manual),
        ),
        ("label", f.label.is_some(), source == Source::Github),
        ("labels", f.labels.is_some(), source == Source::Github),
        ("repo", f.repo.is_some(), source == Source::Github),
        ("guild", f.guild.is_some(), source == Source::Discord),
        ("workspace", f.workspace.is_some(), source == Source::Slack),
        (
            "channels",
            f.channels.is_some(),
            matches!(source, Source::Slack | Source::Discord),
        ),
    ];
    match present.iter().find(|(_, set, applies)| *set && !applies) {
        Some((key, ..)) => Err(reject(
            "filter_unsupported",
            format!("filters.{key} cannot be matched for this provider's events"),
        )),
        None => Ok(()),
    }
}

/// The text after the earliest bot mention, or `None` when there is none.
pub(crate) fn after_mention<'a>(text: &'a str, mentions: &[String]) -> Option<&'a str> {
    mentions
        .iter()
        .filter(|m| !m.is_empty())
        .filter_map(|m| text.find(m.as_str()).map(|i| (i, m.len())))
        .min()
        .and_then(|(i, len)| text.get(i.saturating_add(len)..))
}

/// `body` (leading whitespace ignored) starts with `marker`, followed by whitespace or the end.
pub(crate) fn starts_with_word(body: &str, marker: &str) -> bool {
    body.trim_start()
        .strip_prefix(marker)
        .is_some_and(|rest| rest.chars().next().is_none_or(char::is_whitespace))
}

/// Canonical decomposition with combining marks removed: `Café` → `Cafe`.
fn fold_accents(s: &str) -> String {
    s.nfd()
        .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slack_event(text: &str) -> TriggerEvent {
        TriggerEvent {
            name: "slack.mention".into(),
            actor_id: Some("U01234567".into()),
            actor_name: Some("ana".into()),
            workspace: Some("T01234567".into()),
            channel: Some("C01234567".into()),
            text: text.into(),
            bot_mentions: vec!["<@UBOT>".into()],
            ..TriggerEvent::default()
        }
    }

    fn slack_filters() -> Filters {
        {
            let mut v = Filters::default();
            v.workspace = Some("T01234567".into());
            v.channels = Some(vec!["C01234567".into()]);
            v.from_users = Some(vec!["U01234567".into()]);
            v
        }
    }

    fn code(d: &Admission) -> &'static str {
        match d {
            Admission::Admitted { .. } => "admitted",
            Admission::Rejected(r) => r.code,
        }
    }

    #[test]
    fn slack_seed_filters_admit_only_the_listed_user_channel_and_workspace() {
        let f = slack_filters();
        let ok = admit(
            "slack.mention",
            Some(&f),
            &slack_event("<@UBOT> fix the build"),
        );
        assert_eq!(
            ok,
            Admission::Admitted {
                prompt: "fix the build".into()
            }
        );
        let mut e = slack_event("<@UBOT> hi");
        e.actor_id = Some("U999".into());
        e.actor_name = Some("mallory".into());
        assert_eq!(
            code(&admit("slack.mention", Some(&f), &e)),
            "user_not_allowed"
        );
        let mut e = slack_event("<@UBOT> hi");
        e.channel = Some("C999".into());
        assert_eq!(
            code(&admit("slack.mention", Some(&f), &e)),
            "channel_mismatch"
        );
        let mut e = slack_event("<@UBOT> hi");
        e.workspace = Some("T999".into());
        assert_eq!(
            code(&admit("slack.mention", Some(&f), &e)),
            "workspace_mismatch"
        );
        assert_eq!(
            code(&admit(
                "slack.mention",
                Some(&f),
                &slack_event("no mention")
            )),
            "not_mentioned"
        );
        let mut e = slack_event("<@UBOT> hi");
        e.actor_is_bot = true;
        assert_eq!(code(&admit("slack.mention", Some(&f), &e)), "author_is_bot");
        assert_eq!(
            code(&admit("slack.mention", None, &slack_event("<@UBOT> hi"))),
            "filters_required"
        );
        // Usernames are accepted too, as the Hub does.
        let f2 = {
            let mut v = slack_filters();
            v.from_users = Some(vec!["ana".into()]);
            v
        };
        let mut e = slack_event("<@UBOT> hi");
        e.actor_id = Some("U999".into());
        assert!(admit("slack.mention", Some(&f2), &e).is_admitted());
    }

    #[test]
    fn slack_pattern_is_a_word_prefix_after_the_mention() {
        let f = {
            let mut v = slack_filters();
            v.pattern = Some("deploy".into());
            v
        };
        assert!(
            admit(
                "slack.mention",
                Some(&f),
                &slack_event("<@UBOT>   deploy now")
            )
            .is_admitted()
        );
        assert!(admit("slack.mention", Some(&f), &slack_event("<@UBOT> deploy")).is_admitted());
        assert_eq!(
            code(&admit(
                "slack.mention",
                Some(&f),
                &slack_event("<@UBOT> deployment")
            )),
            "pattern_mismatch"
        );
        assert_eq!(
            code(&admit(
                "slack.mention",
                Some(&f),
                &slack_event("<@UBOT> please deploy")
            )),
            "pattern_mismatch"
        );
        let f = {
            let mut v = slack_filters();
            v.contains = Some("deploy".into());
            v
        };
        assert_eq!(
            code(&admit(
                "slack.mention",
                Some(&f),
                &slack_event("<@UBOT> please deploy")
            )),
            "pattern_mismatch"
        );
        assert!(admit("slack.mention", Some(&f), &slack_event("<@UBOT> deploy it")).is_admitted());
    }

    #[test]
    fn github_contains_is_a_substring_and_labels_fold_accents() {
        let f = {
            let mut v = Filters::default();
            v.repo = Some("org/repo".into());
            v.from_users = Some(vec!["octo".into()]);
            v.contains = Some("@bot".into());
            v
        };
        let e = TriggerEvent {
            name: "github.issue_comment".into(),
            actor_name: Some("octo".into()),
            repository: Some("org/repo".into()),
            text: "hey @bot please look".into(),
            ..TriggerEvent::default()
        };
        assert_eq!(
            admit("github.issue_comment", Some(&f), &e),
            Admission::Admitted {
                prompt: e.text.clone()
            }
        );
        let other = TriggerEvent {
            repository: Some("org/other".into()),
            ..e.clone()
        };
        assert_eq!(
            code(&admit("github.issue_comment", Some(&f), &other)),
            "repo_mismatch"
        );
        let quiet = TriggerEvent {
            text: "hey there".into(),
            ..e.clone()
        };
        assert_eq!(
            code(&admit("github.issue_comment", Some(&f), &quiet)),
            "contains_mismatch"
        );
        // A GitHub user id is not a login: ids do not match from_users.
        let by_id = TriggerEvent {
            actor_name: Some("x".into()),
            actor_id: Some("octo".into()),
            ..e.clone()
        };
        assert_eq!(
            code(&admit("github.issue_comment", Some(&f), &by_id)),
            "user_not_allowed"
        );

        let lf = {
            let mut v = Filters::default();
            v.label = Some("Café".into());
            v.from_users = Some(vec!["octo".into()]);
            v
        };
        let labelled = TriggerEvent {
            name: "github.issue_label_added".into(),
            label: Some("Cafe\u{301}".into()),
            ..e.clone()
        };
        assert!(admit("github.issue_label_added", Some(&lf), &labelled).is_admitted());
        let plain = TriggerEvent {
            label: Some("cafe".into()),
            ..labelled.clone()
        };
        assert_eq!(
            code(&admit("github.issue_label_added", Some(&lf), &plain)),
            "label_mismatch"
        );
        let lsf = {
            let mut v = Filters::default();
            v.labels = Some(vec!["a".into(), "b".into()]);
            v.from_users = Some(vec!["octo".into()]);
            v
        };
        let some = TriggerEvent {
            labels: vec!["a".into()],
            ..labelled.clone()
        };
        assert_eq!(
            code(&admit("github.issue_label_added", Some(&lsf), &some)),
            "labels_missing"
        );
        let all = TriggerEvent {
            labels: vec!["b".into(), "a".into()],
            ..labelled
        };
        assert!(admit("github.issue_label_added", Some(&lsf), &all).is_admitted());
    }

    #[test]
    fn manual_runs_need_a_listed_actor_and_matching_inputs() {
        let f = {
            let mut v = Filters::default();
            v.from_users = Some(vec!["automation".into()]);
            v.inputs = Some(vec![("env".into(), json!("prod"))]);
            v
        };
        let e = TriggerEvent {
            name: "manual.run".into(),
            actor_id: Some("automation".into()),
            text: "go".into(),
            inputs: vec![("env".into(), json!("prod"))],
            ..TriggerEvent::default()
        };
        assert!(admit("manual.run", Some(&f), &e).is_admitted());
        let stranger = TriggerEvent {
            actor_id: Some("eve".into()),
            ..e.clone()
        };
        let Admission::Rejected(r) = admit("manual.run", Some(&f), &stranger) else {
            panic!()
        };
        assert_eq!(
            (r.code, r.message.as_str()),
            ("actor_forbidden", "manual run rejected: actor_forbidden")
        );
        assert_eq!(code(&admit("manual.run", None, &e)), "actor_forbidden");
        let staging = TriggerEvent {
            inputs: vec![("env".into(), json!("staging"))],
            ..e.clone()
        };
        assert_eq!(
            code(&admit("manual.run", Some(&f), &staging)),
            "input_mismatch"
        );
    }

    #[test]
    fn discord_matches_parent_channel_and_inapplicable_keys_reject() {
        let f = {
            let mut v = Filters::default();
            v.guild = Some("G1".into());
            v.channels = Some(vec!["C1".into()]);
            v.from_users = Some(vec!["ana".into()]);
            v
        };
        let e = TriggerEvent {
            name: "discord.mention".into(),
            actor_id: Some("42".into()),
            actor_name: Some("ana".into()),
            guild: Some("G1".into()),
            channel: Some("T9".into()),
            parent_channel: Some("C1".into()),
            text: "<@&ROLE> hello".into(),
            bot_mentions: vec!["<@1>".into(), "<@&ROLE>".into()],
            ..TriggerEvent::default()
        };
        assert_eq!(
            admit("discord.mention", Some(&f), &e),
            Admission::Admitted {
                prompt: "hello".into()
            }
        );
        let with_repo = {
            let mut v = f.clone();
            v.repo = Some("o/r".into());
            v
        };
        assert_eq!(
            code(&admit("discord.mention", Some(&with_repo), &e)),
            "filter_unsupported"
        );
        assert_eq!(
            code(&admit("slack.mention", Some(&f), &e)),
            "event_mismatch"
        );
    }

    /// Every rejection code with its exact message, each beside an admitted positive control.
    #[test]
    fn every_rejection_code_has_its_exact_message() {
        let base_f = slack_filters();
        let base_e = slack_event("<@UBOT> deploy now");
        assert!(admit("slack.mention", Some(&base_f), &base_e).is_admitted());
        let gh_f = {
            let mut v = Filters::default();
            v.from_users = Some(vec!["octo".into()]);
            v
        };
        let gh_e = TriggerEvent {
            name: "github.issue_comment".into(),
            actor_name: Some("octo".into()),
            repository: Some("o/r".into()),
            text: "hello".into(),
            ..TriggerEvent::default()
        };
        assert!(admit("github.issue_comment", Some(&gh_f), &gh_e).is_admitted());
        let f = |g: &dyn Fn(&mut Filters)| {
            let mut x = base_f.clone();
            g(&mut x);
            x
        };
        let e = |g: &dyn Fn(&mut TriggerEvent)| {
            let mut x = base_e.clone();
            g(&mut x);
            x
        };
        let ghf = |g: &dyn Fn(&mut Filters)| {
            let mut x = gh_f.clone();
            g(&mut x);
            x
        };
        let ghe = |g: &dyn Fn(&mut TriggerEvent)| {
            let mut x = gh_e.clone();
            g(&mut x);
            x
        };
        let cases: Vec<(&str, Option<Filters>, TriggerEvent, &str, &str)> = vec![
            (
                "slack.mention",
                Some(base_f.clone()),
                e(&|x| x.name = "discord.mention".into()),
                "event_mismatch",
                "event `discord.mention` does not start triggers on `slack.mention`",
            ),
            (
                "teams.mention",
                Some(base_f.clone()),
                e(&|x| x.name = "teams.mention".into()),
                "unsupported_event",
                "palisade cannot admit `teams.mention` events",
            ),
            (
                "slack.mention",
                None,
                base_e.clone(),
                "filters_required",
                "externally sourced events need trigger filters with from_users",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.repo = Some("o/r".into()))),
                base_e.clone(),
                "filter_unsupported",
                "filters.repo cannot be matched for this provider's events",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.from_users = None)),
                base_e.clone(),
                "from_users_required",
                "a non-empty filters.from_users allowlist is required for externally sourced events",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.from_users = Some(vec!["U9".into()]))),
                base_e.clone(),
                "user_not_allowed",
                "the event's author is not in filters.from_users",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.connection = Some("work".into()))),
                base_e.clone(),
                "connection_mismatch",
                "event did not arrive on connection `work`",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.workspace = Some("T9".into()))),
                base_e.clone(),
                "workspace_mismatch",
                "event is not from workspace `T9`",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.channels = Some(vec!["C9".into()]))),
                base_e.clone(),
                "channel_mismatch",
                "event is not from one of filters.channels",
            ),
            (
                "slack.mention",
                Some(f(&|x| {
                    x.inputs = Some(vec![("env".into(), serde_json::json!("prod"))])
                })),
                base_e.clone(),
                "input_mismatch",
                "input `env` does not equal \"prod\"",
            ),
            (
                "slack.mention",
                Some(base_f.clone()),
                e(&|x| x.actor_is_bot = true),
                "author_is_bot",
                "events written by a bot do not start triggers",
            ),
            (
                "slack.mention",
                Some(base_f.clone()),
                e(&|x| x.text = "deploy now".into()),
                "not_mentioned",
                "the message does not mention the bot",
            ),
            (
                "slack.mention",
                Some(f(&|x| x.contains = Some("fix".into()))),
                base_e.clone(),
                "pattern_mismatch",
                "the text after the mention does not start with filters.contains `fix`",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.repo = Some("o/s".into()))),
                gh_e.clone(),
                "repo_mismatch",
                "event is not from repository `o/s`",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.pattern = Some("bye".into()))),
                gh_e.clone(),
                "pattern_mismatch",
                "the text does not start with `bye`",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.contains = Some("bye".into()))),
                gh_e.clone(),
                "contains_mismatch",
                "the text does not contain `bye`",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.label = Some("bug".into()))),
                ghe(&|x| x.label = Some("docs".into())),
                "label_mismatch",
                "the event did not add label `bug`",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.labels = Some(vec!["bug".into()]))),
                gh_e.clone(),
                "labels_missing",
                "label `bug` is not present",
            ),
            (
                "github.issue_comment",
                Some(ghf(&|x| x.guild = Some("G".into()))),
                gh_e.clone(),
                "filter_unsupported",
                "filters.guild cannot be matched for this provider's events",
            ),
            (
                "manual.run",
                Some(gh_f.clone()),
                TriggerEvent {
                    name: "manual.run".into(),
                    actor_id: Some("eve".into()),
                    ..TriggerEvent::default()
                },
                "actor_forbidden",
                "manual run rejected: actor_forbidden",
            ),
        ];
        for (on, filters, event, want_code, want_message) in cases {
            let Admission::Rejected(r) = admit(on, filters.as_ref(), &event) else {
                panic!("{want_code}: admitted")
            };
            assert_eq!((r.code, r.message.as_str()), (want_code, want_message));
        }
    }
}
