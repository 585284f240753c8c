//! The one table of the events each Paseo Hub release emits
//! (`hub-triggers.md` §0 and §3): the schema's release gate and lint L13
//! both read it, so they cannot disagree about an event.
//!
//! Two questions are asked of it. *Does the chosen release's schema take
//! this event?* Event names are checked by a regular expression only
//! (`future.thing` parses), but a provider namespace a release does not
//! know at all (`schedule.*` before main, `forgejo.*` before the Forgejo
//! pull request) comes with keys and shapes the older schema lacks, so the
//! schema gate is per namespace ([`event_release`]). *Does the chosen
//! release emit it?* That is per event ([`first_emitted_in`]): a name the
//! schema takes but no release emits never fires (L13).

use super::Release;

/// Every event some release emits, with the first release that emits it
/// (M `events.ts` for 0.9.0, §3.3–3.4; `schedule.tick` on main; the Linear
/// and Forgejo pull requests, §3.4–3.5).
const EVENTS: &[(&str, Release)] = &[
    ("slack.mention", Release::V0_9_0),
    ("discord.mention", Release::V0_9_0),
    ("manual.run", Release::V0_9_0),
    ("github.issue_created", Release::V0_9_0),
    ("github.pull_request_created", Release::V0_9_0),
    ("github.issue_comment_created", Release::V0_9_0),
    ("github.pull_request_comment_created", Release::V0_9_0),
    ("github.issue_label_added", Release::V0_9_0),
    ("github.pull_request_label_added", Release::V0_9_0),
    ("github.issue_comment", Release::V0_9_0),
    ("github.issues", Release::V0_9_0),
    ("github.pull_request", Release::V0_9_0),
    ("github.pull_request_review", Release::V0_9_0),
    ("github.pull_request_review_comment", Release::V0_9_0),
    ("github.push", Release::V0_9_0),
    ("linear.issue_entered_scope", Release::V0_9_0),
    ("linear.issue_assigned", Release::V0_9_0),
    ("linear.comment_created", Release::V0_9_0),
    ("schedule.tick", Release::Main),
    ("linear.agent_session", Release::Unreleased),
    ("forgejo.issue_created", Release::Unreleased),
    ("forgejo.pull_request_created", Release::Unreleased),
    ("forgejo.issue_comment_created", Release::Unreleased),
    ("forgejo.pull_request_comment_created", Release::Unreleased),
    ("forgejo.issue_label_added", Release::Unreleased),
    ("forgejo.pull_request_label_added", Release::Unreleased),
    ("forgejo.issue_assigned", Release::Unreleased),
    ("forgejo.pull_request_assigned", Release::Unreleased),
    ("forgejo.pull_request_review_approved", Release::Unreleased),
    ("forgejo.pull_request_review_rejected", Release::Unreleased),
    ("forgejo.pull_request_review_requested", Release::Unreleased),
    ("forgejo.issue_closed", Release::Unreleased),
    ("forgejo.issue_reopened", Release::Unreleased),
    ("forgejo.pull_request_closed", Release::Unreleased),
    ("forgejo.pull_request_merged", Release::Unreleased),
    ("forgejo.pull_request_reopened", Release::Unreleased),
    ("forgejo.pull_request_synchronized", Release::Unreleased),
    ("forgejo.action_run_failure", Release::Unreleased),
    ("forgejo.action_run_success", Release::Unreleased),
    ("forgejo.issue_comment", Release::Unreleased),
    ("forgejo.issues", Release::Unreleased),
    ("forgejo.pull_request", Release::Unreleased),
    ("forgejo.pull_request_review", Release::Unreleased),
    ("forgejo.pull_request_review_comment", Release::Unreleased),
    ("forgejo.push", Release::Unreleased),
];

/// The first release that emits `event` (`None`: no release does).
pub(crate) fn first_emitted_in(event: &str) -> Option<Release> {
    EVENTS.iter().find(|(e, _)| *e == event).map(|&(_, r)| r)
}

/// The events `release` emits, in table order.
pub(crate) fn emitted_by(release: Release) -> impl Iterator<Item = &'static str> {
    EVENTS
        .iter()
        .filter(move |&&(_, r)| r <= release)
        .map(|&(e, _)| e)
}

/// The first release whose schema takes `event`: the first release that
/// emits any event of its provider namespace (`schedule.` is main,
/// `forgejo.` unreleased). A namespace no release knows is taken by every
/// release's schema, as the Hub's name pattern takes it; lint L13 says it
/// never fires.
pub fn event_release(event: &str) -> Release {
    let namespace = event.split_once('.').map_or(event, |(ns, _)| ns);
    EVENTS
        .iter()
        .filter(|(e, _)| e.split_once('.').is_some_and(|(ns, _)| ns == namespace))
        .map(|&(_, r)| r)
        .min()
        .unwrap_or(Release::V0_9_0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_gate_follows_the_namespaces_first_release() {
        assert_eq!(event_release("schedule.tick"), Release::Main);
        assert_eq!(event_release("forgejo.issue_created"), Release::Unreleased);
        // A Linear event of the pull request is taken by 0.9.0's schema
        // (Linear is a 0.9.0 namespace); L13 says 0.9.0 never emits it.
        assert_eq!(event_release("linear.agent_session"), Release::V0_9_0);
        assert_eq!(
            first_emitted_in("linear.agent_session"),
            Some(Release::Unreleased)
        );
        assert_eq!(event_release("future.thing"), Release::V0_9_0);
        assert_eq!(first_emitted_in("future.thing"), None);
    }

    #[test]
    fn no_event_is_emitted_before_its_schema_takes_it() {
        for &(e, r) in EVENTS {
            assert!(event_release(e) <= r, "{e}: schema gate after emission");
            assert_eq!(first_emitted_in(e), Some(r), "{e} listed twice");
        }
    }

    #[test]
    fn each_release_emits_what_the_ones_before_it_do() {
        let v09: Vec<_> = emitted_by(Release::V0_9_0).collect();
        let main: Vec<_> = emitted_by(Release::Main).collect();
        let all: Vec<_> = emitted_by(Release::Unreleased).collect();
        assert!(v09.contains(&"slack.mention") && !v09.contains(&"schedule.tick"));
        assert!(main.contains(&"schedule.tick") && !main.contains(&"forgejo.push"));
        assert!(all.contains(&"forgejo.push") && all.contains(&"linear.agent_session"));
        assert!(v09.iter().all(|e| main.contains(e)) && main.iter().all(|e| all.contains(e)));
    }
}
