//! Strict provider option schemas for `codex`, `claude` and `opencode`.
//!
//! Each provider's `agent.options` object is checked against a declarative
//! [`Shape`], strict at every level, as Paseo's zod schemas are (spec §8).
//! The same shapes print as JSON Schema for editors
//! ([`json_schema`]). Findings are reported at authored paths, with unknown
//! keys reported at the parent path (`Unrecognized key: "k"`) and union
//! failures flattened: every branch's issues, as zod does.

use serde_json::{Map, Value, json};

use crate::diagnostic::{Diagnostic, Diagnostics, Parsed, Path};
use crate::lazy_path::Lp;
use crate::yaml::{Node, Value as Y};

mod daemon;
pub use daemon::{
    DaemonVersion, MODELLED_DAEMON, NEWER_DAEMON_CODE, OptionsTarget, PROVIDER_SCHEMAS,
    ProviderSchema, provider_schema,
};
pub(crate) use daemon::{is_unknown_option_key, soften_tree};

/// The shape of an option value.
#[derive(Debug)]
#[non_exhaustive]
pub enum Shape {
    /// `true` or `false`.
    Bool,
    /// Any string.
    Str,
    /// An array of strings.
    StrArray,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// An integer greater than 0.
    PosInt,
    /// An integer ≥ 0.
    NonNegInt,
    /// An integer in an inclusive range.
    IntRange(i64, i64),
    /// An object with exactly these optional keys (strict).
    Object(&'static [(&'static str, Shape)]),
    /// An object with exactly these keys; the listed ones are required.
    ObjectReq(&'static [(&'static str, Shape)], &'static [&'static str]),
    /// An object from arbitrary string keys to one shape.
    Record(&'static Shape),
    /// The first branch that matches.
    Union(&'static [Shape]),
}

const ALLOW_DENY: Shape = Shape::Enum(&["allow", "deny"]);

const CODEX_NETWORK_POLICY: Shape = Shape::Object(&[
    ("enabled", Shape::Bool),
    ("enable_socks5", Shape::Bool),
    ("enable_socks5_udp", Shape::Bool),
    ("allow_local_binding", Shape::Bool),
    ("allow_upstream_proxy", Shape::Bool),
    ("dangerously_allow_all_unix_sockets", Shape::Bool),
    ("dangerously_allow_non_loopback_proxy", Shape::Bool),
    ("proxy_url", Shape::Str),
    ("socks_url", Shape::Str),
    ("domains", Shape::Record(&ALLOW_DENY)),
    ("unix_sockets", Shape::Record(&ALLOW_DENY)),
]);

/// Codex options: the normative core of spec §8.1.
pub const CODEX: Shape = Shape::Object(&[
    (
        "approval_policy",
        Shape::Union(&[
            Shape::Enum(&["untrusted", "on-request", "never"]),
            Shape::ObjectReq(
                &[(
                    "granular",
                    Shape::Object(&[
                        ("sandbox_approval", Shape::Bool),
                        ("rules", Shape::Bool),
                        ("mcp_elicitations", Shape::Bool),
                        ("request_permissions", Shape::Bool),
                        ("skill_approval", Shape::Bool),
                    ]),
                )],
                &["granular"],
            ),
        ]),
    ),
    (
        "sandbox_mode",
        Shape::Enum(&["read-only", "workspace-write", "danger-full-access"]),
    ),
    (
        "sandbox_workspace_write",
        Shape::Object(&[
            ("writable_roots", Shape::StrArray),
            ("network_access", Shape::Bool),
            ("exclude_slash_tmp", Shape::Bool),
            ("exclude_tmpdir_env_var", Shape::Bool),
        ]),
    ),
    (
        "web_search",
        Shape::Enum(&["disabled", "cached", "indexed", "live"]),
    ),
    (
        "features",
        Shape::Object(&[
            ("multi_agent_v2", Shape::Bool),
            (
                "network_proxy",
                Shape::Union(&[Shape::Bool, CODEX_NETWORK_POLICY]),
            ),
        ]),
    ),
]);

const CLAUDE_PERMISSION_RULES: Shape = Shape::Object(&[
    ("allow", Shape::StrArray),
    ("ask", Shape::StrArray),
    ("deny", Shape::StrArray),
]);

const CLAUDE_SANDBOX_NETWORK: Shape = Shape::Object(&[
    ("allowedDomains", Shape::StrArray),
    ("deniedDomains", Shape::StrArray),
    ("strictAllowlist", Shape::Bool),
    ("allowManagedDomainsOnly", Shape::Bool),
    ("allowUnixSockets", Shape::StrArray),
    ("allowAllUnixSockets", Shape::Bool),
    ("allowLocalBinding", Shape::Bool),
    ("allowMachLookup", Shape::StrArray),
    ("httpProxyPort", Shape::PosInt),
    ("socksProxyPort", Shape::PosInt),
    (
        "tlsTerminate",
        Shape::Object(&[("caCertPath", Shape::Str), ("caKeyPath", Shape::Str)]),
    ),
]);

const CLAUDE_SANDBOX_FILESYSTEM: Shape = Shape::Object(&[
    ("allowWrite", Shape::StrArray),
    ("denyWrite", Shape::StrArray),
    ("denyRead", Shape::StrArray),
    ("allowRead", Shape::StrArray),
    ("allowManagedReadPathsOnly", Shape::Bool),
    ("disabled", Shape::Bool),
]);

/// Claude options: spec §8.2 at Claude Agent SDK 0.3.246 (`tools` included).
pub const CLAUDE: Shape = Shape::Object(&[
    ("tools", Shape::StrArray),
    ("allowedTools", Shape::StrArray),
    ("disallowedTools", Shape::StrArray),
    ("additionalDirectories", Shape::StrArray),
    (
        "sandbox",
        Shape::Object(&[
            ("enabled", Shape::Bool),
            ("failIfUnavailable", Shape::Bool),
            ("autoAllowBashIfSandboxed", Shape::Bool),
            ("excludedCommands", Shape::StrArray),
            ("allowUnsandboxedCommands", Shape::Bool),
            ("network", CLAUDE_SANDBOX_NETWORK),
            ("filesystem", CLAUDE_SANDBOX_FILESYSTEM),
            ("ignoreViolations", Shape::Record(&Shape::StrArray)),
            ("enableWeakerNestedSandbox", Shape::Bool),
            (
                "ripgrep",
                Shape::ObjectReq(
                    &[("command", Shape::Str), ("args", Shape::StrArray)],
                    &["command"],
                ),
            ),
        ]),
    ),
    (
        "settings",
        Shape::Object(&[
            ("permissions", CLAUDE_PERMISSION_RULES),
            (
                "sandbox",
                Shape::Object(&[
                    ("enabled", Shape::Bool),
                    ("failIfUnavailable", Shape::Bool),
                    ("autoAllowBashIfSandboxed", Shape::Bool),
                    ("excludedCommands", Shape::StrArray),
                    ("allowUnsandboxedCommands", Shape::Bool),
                    ("network", CLAUDE_SANDBOX_NETWORK),
                    ("filesystem", CLAUDE_SANDBOX_FILESYSTEM),
                ]),
            ),
        ]),
    ),
]);

const OPENCODE_ACTION: Shape = Shape::Enum(&["ask", "allow", "deny"]);
const OPENCODE_RULE: Shape = Shape::Union(&[OPENCODE_ACTION, Shape::Record(&OPENCODE_ACTION)]);

/// OpenCode options: spec §8.3 (`"*"` and `hub_*` keys rejected).
pub const OPENCODE: Shape = Shape::Object(&[(
    "permission",
    Shape::Union(&[
        OPENCODE_ACTION,
        Shape::Object(&[
            ("read", OPENCODE_RULE),
            ("edit", OPENCODE_RULE),
            ("glob", OPENCODE_RULE),
            ("grep", OPENCODE_RULE),
            ("list", OPENCODE_RULE),
            ("bash", OPENCODE_RULE),
            ("task", OPENCODE_RULE),
            ("external_directory", OPENCODE_RULE),
            ("repo_clone", OPENCODE_RULE),
            ("repo_overview", OPENCODE_RULE),
            ("lsp", OPENCODE_RULE),
            ("skill", OPENCODE_RULE),
            ("todowrite", OPENCODE_ACTION),
            ("question", OPENCODE_ACTION),
            ("webfetch", OPENCODE_ACTION),
            ("websearch", OPENCODE_ACTION),
            ("codesearch", OPENCODE_ACTION),
            ("doom_loop", OPENCODE_ACTION),
        ]),
    ]),
)]);

/// The providers palisade knows strict option schemas for.
pub const PROVIDERS: &[&str] = &["codex", "claude", "opencode"];

/// The strict schema of a provider, by base provider id (the text before
/// the first `/`).
pub fn provider_shape(provider: &str) -> Option<&'static Shape> {
    provider_schema(provider).map(|s| s.shape)
}

/// One finding of a shape check, relative to the checked node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Issue {
    /// Stable code (`unknown_key`, `invalid_type`, `invalid_value`, `missing_field`).
    pub code: &'static str,
    /// Zod-style message.
    pub message: String,
    /// Path relative to the checked node.
    pub path: Path,
    /// 1-based line of the node the issue is about.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Where the node ends: line and the column just after it (0: not known).
    pub end_line: u32,
    /// See [`Issue::end_line`].
    pub end_column: u32,
    /// A did-you-mean for an unknown key or enum value, when one is close.
    pub help: Option<String>,
}

/// Checks `node` against `shape`, collecting every issue.
pub fn check(shape: &Shape, node: &Node) -> Vec<Issue> {
    let mut out = Vec::new();
    let root = Path::root();
    check_at(shape, node, &Lp::Base(&root), &mut out);
    out
}

fn issue(out: &mut Vec<Issue>, code: &'static str, message: String, path: &Lp<'_>, node: &Node) {
    out.push(Issue {
        code,
        message,
        path: path.to_path(),
        line: node.pos.line,
        column: node.pos.column,
        end_line: node.end.line,
        end_column: node.end.column,
        help: None,
    });
}

fn type_issue(out: &mut Vec<Issue>, expected: &str, path: &Lp<'_>, node: &Node) {
    issue(
        out,
        "invalid_type",
        format!(
            "Invalid input: expected {expected}, received {}",
            node.value.type_name()
        ),
        path,
        node,
    );
}

fn enum_list(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join("|")
}

fn check_at(shape: &Shape, node: &Node, path: &Lp<'_>, out: &mut Vec<Issue>) {
    match shape {
        Shape::Bool => {
            if !matches!(node.value, Y::Bool(_)) {
                type_issue(out, "boolean", path, node);
            }
        }
        Shape::Str => {
            if !matches!(node.value, Y::String(_)) {
                type_issue(out, "string", path, node);
            }
        }
        Shape::StrArray => match &node.value {
            Y::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    check_at(&Shape::Str, item, &Lp::Index(path, i), out);
                }
            }
            _ => type_issue(out, "array", path, node),
        },
        Shape::Enum(values) => match &node.value {
            Y::String(s) if values.contains(&s.as_ref()) => {}
            _ => {
                issue(
                    out,
                    "invalid_value",
                    format!("Invalid option: expected one of {}", enum_list(values)),
                    path,
                    node,
                );
                if let (Y::String(s), Some(last)) = (&node.value, out.last_mut()) {
                    last.help = crate::suggest::did_you_mean(s, values);
                }
            }
        },
        Shape::PosInt | Shape::NonNegInt | Shape::IntRange(..) => {
            let (min, max) = match shape {
                Shape::PosInt => (1, i64::MAX),
                Shape::NonNegInt => (0, i64::MAX),
                Shape::IntRange(a, b) => (*a, *b),
                _ => (0, 0),
            };
            match &node.value {
                Y::Number(n) => match n.as_i64() {
                    Some(v) if v < min => issue(
                        out,
                        "invalid_value",
                        format!("Too small: expected number to be >={min}"),
                        path,
                        node,
                    ),
                    Some(v) if v > max => issue(
                        out,
                        "invalid_value",
                        format!("Too big: expected number to be <={max}"),
                        path,
                        node,
                    ),
                    Some(_) => {}
                    None => type_issue(out, "int", path, node),
                },
                _ => type_issue(out, "number", path, node),
            }
        }
        Shape::Object(fields) => check_object(fields, &[], node, path, out),
        Shape::ObjectReq(fields, required) => check_object(fields, required, node, path, out),
        Shape::Record(value) => match &node.value {
            Y::Map(entries) => {
                for (k, v) in entries {
                    check_at(value, v, &Lp::Key(path, &k.text), out);
                }
            }
            _ => type_issue(out, "record", path, node),
        },
        Shape::Union(branches) => {
            let mut all = Vec::new();
            for branch in *branches {
                let mut branch_issues = Vec::new();
                check_at(branch, node, path, &mut branch_issues);
                if branch_issues.is_empty() {
                    return;
                }
                all.extend(branch_issues);
            }
            out.extend(all);
        }
    }
}

fn check_object(
    fields: &[(&str, Shape)],
    required: &[&str],
    node: &Node,
    path: &Lp<'_>,
    out: &mut Vec<Issue>,
) {
    let Y::Map(entries) = &node.value else {
        type_issue(out, "object", path, node);
        return;
    };
    let mut unknown = Vec::new();
    for (k, v) in entries {
        match fields.iter().find(|(name, _)| *name == k.text) {
            Some((_, shape)) => check_at(shape, v, &Lp::Key(path, &k.text), out),
            None => unknown.push(k),
        }
    }
    if let Some(first) = unknown.first() {
        let names = unknown
            .iter()
            .map(|k| format!("{:?}", k.text))
            .collect::<Vec<_>>()
            .join(", ");
        let plural = if unknown.len() > 1 { "s" } else { "" };
        out.push(Issue {
            code: "unknown_key",
            message: format!("Unrecognized key{plural}: {names}"),
            path: path.to_path(),
            line: first.pos.line,
            column: first.pos.column,
            end_line: first.end.line,
            end_column: first.end.column,
            help: unknown.iter().find_map(|k| {
                let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                crate::suggest::nearest(&k.text, &known)
                    .map(|n| format!("did you mean `{n}` (for {:?})?", k.text))
            }),
        });
    }
    for name in required {
        if !entries.iter().any(|(k, _)| k.text == *name) {
            issue(
                out,
                "missing_field",
                format!(
                    "Invalid input: expected {}, received undefined",
                    shape_type(fields, name)
                ),
                &Lp::Key(path, name),
                node,
            );
        }
    }
}

fn shape_type(fields: &[(&str, Shape)], name: &str) -> &'static str {
    match fields.iter().find(|(n, _)| *n == name).map(|(_, s)| s) {
        Some(Shape::Bool) => "boolean",
        Some(Shape::Str | Shape::Enum(_)) => "string",
        Some(Shape::StrArray) => "array",
        Some(Shape::PosInt | Shape::NonNegInt | Shape::IntRange(..)) => "number",
        _ => "object",
    }
}

/// Validates a provider's `options` node of the document `file`. `path` is
/// the authored path of the `options` node itself (ending in
/// `.agent.options` or `.agents.<name>.options`); findings are reported at
/// `path` plus the path inside the options.
///
/// An unknown provider is one `unknown_provider` error: palisade will not
/// pass options it cannot check.
pub fn validate(
    file: &str,
    provider: &str,
    node: &Node,
    path: &Path,
) -> Result<Parsed<()>, Diagnostics> {
    crate::diagnostic::outcome(file, Some(()), findings(file, provider, node, path))
}

/// [`validate`] for options that will run on `target`'s daemon: when it
/// is newer than the one the provider's schema models, an unknown key is
/// the warning `unknown_option_newer_daemon` (a newer daemon may know it)
/// instead of an error; every known key is checked as strictly.
///
/// ```rust
/// use palisade_schema::options::{self, DaemonVersion, OptionsTarget};
/// use serde_json::json;
///
/// let newer = OptionsTarget::daemon(DaemonVersion::new(99, 0, 0));
/// let added = json!({"sandbox_mode": "read-only", "added_later": true});
/// assert!(options::validate_json("codex", &added).is_err());
/// let parsed = options::validate_json_for("codex", &added, &newer).unwrap();
/// assert_eq!(parsed.warnings()[0].code, "unknown_option_newer_daemon");
/// // A known key with a bad value is still refused.
/// assert!(options::validate_json_for("codex", &json!({"sandbox_mode": "x"}), &newer).is_err());
/// ```
pub fn validate_for(
    file: &str,
    provider: &str,
    node: &Node,
    path: &Path,
    target: &OptionsTarget,
) -> Result<Parsed<()>, Diagnostics> {
    let mut found = findings(file, provider, node, path);
    if let Some(schema) = provider_schema(provider)
        && target.is_newer_than(schema)
    {
        for d in found.iter_mut().filter(|d| d.code == "unknown_key") {
            daemon::soften(d, schema, target);
        }
    }
    crate::diagnostic::outcome(file, Some(()), found)
}

/// [`validate_json`] for options that will run on `target`'s daemon (see
/// [`validate_for`]).
pub fn validate_json_for(
    provider: &str,
    options: &Value,
    target: &OptionsTarget,
) -> Result<Parsed<()>, Diagnostics> {
    if json_depth(options) > crate::yaml::MAX_DEPTH {
        return Err(Diagnostics::one(Diagnostic::error(
            "yaml_limit_exceeded",
            format!("nesting deeper than {} levels", crate::yaml::MAX_DEPTH),
        )));
    }
    let node = Node::from_json(options);
    validate_for("", provider, &node, &Path::root(), target)
}

/// Validates provider options given as JSON, as an orchestrator holds them
/// at run time, with the same checks, codes, messages and paths as
/// [`validate`] (paths are relative to the options object). JSON has no
/// positions: the file is empty and the line and column are 0.
///
/// ```rust
/// use palisade_schema::options;
/// use serde_json::json;
///
/// assert!(options::validate_json("codex", &json!({"sandbox_mode": "read-only"})).is_ok());
///
/// let refused = options::validate_json("codex", &json!({"cwd": "/x"})).unwrap_err();
/// assert_eq!(refused.first().code, "unknown_key");
/// assert_eq!(refused.first().to_string(), "error[unknown_key]: Unrecognized key: \"cwd\"");
/// ```
///
/// A value nested deeper than [`crate::yaml::MAX_DEPTH`] levels is refused
/// (`yaml_limit_exceeded`), as it is in YAML, before any recursion.
pub fn validate_json(provider: &str, options: &Value) -> Result<Parsed<()>, Diagnostics> {
    if json_depth(options) > crate::yaml::MAX_DEPTH {
        return Err(Diagnostics::one(Diagnostic::error(
            "yaml_limit_exceeded",
            format!("nesting deeper than {} levels", crate::yaml::MAX_DEPTH),
        )));
    }
    let node = Node::from_json(options);
    validate("", provider, &node, &Path::root())
}

/// How deeply `value` nests arrays and objects (a scalar is 0), without
/// recursion.
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(entries) => Box::new(entries.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

/// [`validate`]'s findings, for the crate's walkers.
pub(crate) fn findings(file: &str, provider: &str, node: &Node, path: &Path) -> Vec<Diagnostic> {
    let Some(shape) = provider_shape(provider) else {
        return vec![
            Diagnostic::error(
                "unknown_provider",
                format!(
                    "provider {provider:?} has no strict option schema; palisade knows {}",
                    PROVIDERS.join(", ")
                ),
            )
            .in_file(file)
            .at(node.pos.line, node.pos.column)
            .until(node.end.line, node.end.column)
            .with_path(path.clone())
            .with_help("use codex, claude or opencode, or remove options"),
        ];
    };
    check(shape, node)
        .into_iter()
        .map(|i| {
            let mut full = path.clone();
            full.0.extend(i.path.0);
            let d = Diagnostic::error(i.code, i.message)
                .in_file(file)
                .at(i.line, i.column)
                .until(i.end_line, i.end_column)
                .with_path(full);
            match i.help {
                Some(help) => d.with_help(help),
                None => d,
            }
        })
        .collect()
}

/// The JSON Schema (draft 2020-12) of a shape.
pub fn shape_schema(shape: &Shape) -> Value {
    match shape {
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Str => json!({"type": "string"}),
        Shape::StrArray => json!({"type": "array", "items": {"type": "string"}}),
        Shape::Enum(values) => json!({"type": "string", "enum": values}),
        Shape::PosInt => json!({"type": "integer", "exclusiveMinimum": 0}),
        Shape::NonNegInt => json!({"type": "integer", "minimum": 0}),
        Shape::IntRange(a, b) => json!({"type": "integer", "minimum": a, "maximum": b}),
        Shape::Object(fields) => object_schema(fields, &[]),
        Shape::ObjectReq(fields, required) => object_schema(fields, required),
        Shape::Record(value) => {
            json!({"type": "object", "additionalProperties": shape_schema(value)})
        }
        Shape::Union(branches) => {
            json!({"anyOf": branches.iter().map(shape_schema).collect::<Vec<_>>()})
        }
    }
}

fn object_schema(fields: &[(&str, Shape)], required: &[&str]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|(k, s)| ((*k).to_owned(), shape_schema(s)))
        .collect();
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), Value::Object(props));
    if !required.is_empty() {
        m.insert("required".into(), json!(required));
    }
    m.insert("additionalProperties".into(), json!(false));
    Value::Object(m)
}

/// The JSON Schema document of a provider's `agent.options`, or `None` for
/// an unknown provider.
pub fn json_schema(provider: &str) -> Option<Value> {
    let shape = provider_shape(provider)?;
    let mut schema = shape_schema(shape);
    if let Value::Object(m) = &mut schema {
        let mut head = Map::new();
        head.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        head.insert(
            "$id".into(),
            json!(format!("urn:palisade:schema:options:{provider}")),
        );
        head.insert(
            "title".into(),
            json!(format!("agent.options for provider {provider}")),
        );
        head.append(m);
        return Some(Value::Object(head));
    }
    Some(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(provider: &str, yaml: &str) -> Vec<String> {
        let node = crate::yaml::parse("t.yml", yaml).unwrap().into_value();
        findings("t.yml", provider, &node, &Path::root())
            .iter()
            .map(|d| format!("providerOptions{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn spec_vectors() {
        assert_eq!(
            issues("codex", "cwd: /x"),
            ["providerOptions: Unrecognized key: \"cwd\""]
        );
        assert_eq!(
            issues("codex", "mcp_servers: {hub: {}}"),
            ["providerOptions: Unrecognized key: \"mcp_servers\""]
        );
        assert_eq!(
            issues(
                "codex",
                "sandbox_workspace_write: {writable_roots: [/a, 42]}"
            ),
            [
                "providerOptions.sandbox_workspace_write.writable_roots[1]: Invalid input: expected string, received number"
            ]
        );
        assert_eq!(
            issues("codex", "approval_policy: on-failure"),
            [
                "providerOptions.approval_policy: Invalid option: expected one of \"untrusted\"|\"on-request\"|\"never\"",
                "providerOptions.approval_policy: Invalid input: expected object, received string"
            ]
        );
        assert_eq!(
            issues("codex", "features: {multi_agent: true}"),
            ["providerOptions.features: Unrecognized key: \"multi_agent\""]
        );
        assert_eq!(
            issues("claude", "hooks: {}"),
            ["providerOptions: Unrecognized key: \"hooks\""]
        );
        let e3 = "Invalid option: expected one of \"ask\"|\"allow\"|\"deny\"";
        assert_eq!(
            issues("opencode", "permission: sometimes"),
            [
                format!("providerOptions.permission: {e3}"),
                "providerOptions.permission: Invalid input: expected object, received string"
                    .to_owned()
            ]
        );
        assert_eq!(
            issues(
                "opencode",
                "permission: {bash: {\"git status\": sometimes}}"
            ),
            [
                format!("providerOptions.permission: {e3}"),
                format!("providerOptions.permission.bash: {e3}"),
                format!("providerOptions.permission.bash[\"git status\"]: {e3}"),
            ]
        );
        assert_eq!(
            issues("opencode", "permission: {hub_reply: deny}"),
            [
                format!("providerOptions.permission: {e3}"),
                "providerOptions.permission: Unrecognized key: \"hub_reply\"".to_owned()
            ]
        );
        assert_eq!(
            issues("opencode", "mcp: {}"),
            ["providerOptions: Unrecognized key: \"mcp\""]
        );
        let unknown = issues("gemini", "x: 1");
        assert_eq!(unknown.len(), 1);
    }

    #[test]
    fn spec_accepts() {
        assert!(issues("codex", "{approval_policy: never, sandbox_mode: workspace-write, sandbox_workspace_write: {writable_roots: [/var/cache/npm], network_access: false}, web_search: disabled, features: {network_proxy: {enabled: true, domains: {packages.example.com: allow, \"*\": deny}}}}").is_empty());
        assert!(issues("claude", "{allowedTools: [Read], disallowedTools: [\"Bash(rm *)\"], sandbox: {enabled: true, failIfUnavailable: true, filesystem: {denyRead: [\"~/.ssh/**\"]}, network: {allowedDomains: [api.anthropic.com], allowLocalBinding: false, allowUnixSockets: [/var/run/docker.sock]}}, settings: {permissions: {ask: [\"Bash(*)\"], deny: [\"Edit(.env)\"]}}}").is_empty());
        assert!(issues("opencode", "{permission: {bash: {\"*\": ask, \"git status\": allow}, external_directory: {\"*\": deny, \"/var/cache/npm/**\": allow}}}").is_empty());
        assert!(issues("codex", "approval_policy: {granular: {rules: true}}").is_empty());
        assert!(issues("codex/gpt-5", "sandbox_mode: read-only").is_empty());
    }
}
