//! The GitHub App permission vocabulary the Hub accepts in a step's
//! `github.permissions`, with the levels GitHub allows for each.
//!
//! Copied from the Hub's `GITHUB_APP_PERMISSION_VOCABULARY`
//! (getpaseo/hub `src/config/github-authority.ts` at commit
//! 8682093799e76dae4873b1c82f5a0a0fc97b2edb, v0.6.0, which models GitHub
//! REST API version 2026-03-10). The Hub's `validateGitHubPermissions`
//! refuses a name outside this table (`unknown GitHub permission`) and a
//! level the name does not allow (`level write is not supported; GitHub
//! allows read`). Update the table and [`API_VERSION`] together.

use crate::model::GithubLevel;

/// The GitHub REST API version the table models.
pub const API_VERSION: &str = "2026-03-10";

const R: &[GithubLevel] = &[GithubLevel::Read];
const W: &[GithubLevel] = &[GithubLevel::Write];
const RW: &[GithubLevel] = &[GithubLevel::Read, GithubLevel::Write];
const RWA: &[GithubLevel] = &[GithubLevel::Read, GithubLevel::Write, GithubLevel::Admin];

/// Every permission name, in the Hub's order, with its allowed levels.
pub const PERMISSIONS: &[(&str, &[GithubLevel])] = &[
    ("actions", RW),
    ("administration", RW),
    ("artifact_metadata", RW),
    ("attestations", RW),
    ("checks", RW),
    ("code_quality", RW),
    ("codespaces", RW),
    ("contents", RW),
    ("dependabot_secrets", RW),
    ("deployments", RW),
    ("discussions", RW),
    ("environments", RW),
    ("issues", RW),
    ("merge_queues", RW),
    ("metadata", RW),
    ("packages", RW),
    ("pages", RW),
    ("pull_requests", RW),
    ("repository_custom_properties", RW),
    ("repository_hooks", RW),
    ("repository_projects", RWA),
    ("secret_scanning_alerts", RW),
    ("secrets", RW),
    ("security_events", RW),
    ("single_file", RW),
    ("statuses", RW),
    ("vulnerability_alerts", RW),
    ("workflows", W),
    ("custom_properties_for_organizations", RW),
    ("members", RW),
    ("organization_administration", RW),
    ("organization_custom_roles", RW),
    ("organization_custom_org_roles", RW),
    ("organization_custom_properties", RWA),
    ("organization_copilot_seat_management", RW),
    ("organization_copilot_agent_settings", RW),
    ("organization_announcement_banners", RW),
    ("organization_events", R),
    ("organization_hooks", RW),
    ("organization_personal_access_tokens", RW),
    ("organization_personal_access_token_requests", RW),
    ("organization_plan", R),
    ("organization_projects", RWA),
    ("organization_packages", RW),
    ("organization_secrets", RW),
    ("organization_self_hosted_runners", RW),
    ("organization_user_blocking", RW),
    ("email_addresses", RW),
    ("followers", RW),
    ("git_ssh_keys", RW),
    ("gpg_keys", RW),
    ("interaction_limits", RW),
    ("profile", W),
    ("starring", RW),
    ("enterprise_custom_properties_for_organizations", RWA),
];

/// The levels GitHub allows for `name`, or `None` for a name that is not
/// a GitHub App permission.
pub fn levels(name: &str) -> Option<&'static [GithubLevel]> {
    PERMISSIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, levels)| *levels)
}

/// Why `name: level` is refused, in the Hub's words (without its path
/// prefix), or `None` when GitHub allows it.
pub fn refusal(name: &str, level: GithubLevel) -> Option<String> {
    let Some(allowed) = levels(name) else {
        return Some("unknown GitHub permission".to_owned());
    };
    if allowed.contains(&level) {
        return None;
    }
    let names: Vec<&str> = allowed.iter().map(|l| l.as_str()).collect();
    Some(format!(
        "level {} is not supported; GitHub allows {}",
        level.as_str(),
        names.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_hubs_55_unique_names() {
        let mut names: Vec<&str> = PERMISSIONS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), 55);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 55, "a name is listed twice");
    }

    #[test]
    fn levels_follow_the_hub_and_refusals_use_its_words() {
        assert_eq!(refusal("contents", GithubLevel::Write), None);
        assert_eq!(refusal("repository_projects", GithubLevel::Admin), None);
        assert_eq!(
            refusal("contents", GithubLevel::Admin).as_deref(),
            Some("level admin is not supported; GitHub allows read or write")
        );
        assert_eq!(
            refusal("workflows", GithubLevel::Read).as_deref(),
            Some("level read is not supported; GitHub allows write")
        );
        assert_eq!(
            refusal("organization_events", GithubLevel::Write).as_deref(),
            Some("level write is not supported; GitHub allows read")
        );
        assert_eq!(
            refusal("wiki", GithubLevel::Read).as_deref(),
            Some("unknown GitHub permission")
        );
        // Names are exact: no case folding, no prototype names.
        assert!(levels("Contents").is_none());
        assert!(levels("constructor").is_none());
        assert!(levels("").is_none());
    }
}
