//! `palisade policy`: the exact tool policy and provider options of each step
//! of a trigger, for an output context, as a dispatcher would send them.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::grant::GrantConfig;
use palisade_policy::plan::{find_trigger, grant_for, static_agent};
use palisade_policy::translate::OpenCodeOrdering;
use palisade_schema::{AgentRef, HubConfig};
use serde_json::{Map, Value, json};

/// Largest file the loader reads.
const READ_CAP: u64 = 8 * 1024 * 1024;
/// Most files a bundle may hold.
const MAX_FILES: usize = 1000;
/// Deepest folder nesting under `.paseo`.
const MAX_DEPTH: usize = 8;

/// Arguments of `palisade policy`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root, a `.paseo` folder, or a single-file workflow.
    path: PathBuf,
    /// The trigger (workflow) name.
    #[arg(long)]
    trigger: String,
    /// Only this step.
    #[arg(long)]
    step: Option<String>,
    /// The run's output context (where outputs would go).
    #[arg(long, value_enum)]
    context: ContextArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Where OpenCode grant rules go relative to authored rules.
    #[arg(long, value_enum, default_value_t = Ordering::GrantsFirst)]
    opencode_order: Ordering,
}

/// An output context.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum ContextArg {
    /// A Slack conversation.
    Slack,
    /// A Discord conversation.
    Discord,
    /// A GitHub issue or pull request.
    Github,
    /// A manual run.
    Manual,
}

impl ContextArg {
    fn context(self) -> OutputContext {
        OutputContext::new(match self {
            Self::Slack => "slack",
            Self::Discord => "discord",
            Self::Github => "github",
            Self::Manual => "manual",
        })
    }
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Readable text.
    Human,
    /// JSON.
    Json,
}

/// OpenCode rule ordering.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Ordering {
    /// Grants first: an authored ask or deny wins (default).
    GrantsFirst,
    /// Grants last: grants override authored asks and denies.
    GrantsLast,
}

impl Ordering {
    pub(crate) fn grant_config(self) -> GrantConfig {
        GrantConfig {
            opencode_ordering: match self {
                Self::GrantsFirst => OpenCodeOrdering::GrantsFirst,
                Self::GrantsLast => OpenCodeOrdering::GrantsLast,
            },
            ..GrantConfig::default()
        }
    }
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let config = load_config(&args.path)?;
    let trigger = find_trigger(&config, &args.trigger).map_err(|e| e.to_string())?;
    let steps: Vec<_> = match &args.step {
        None => trigger.steps.iter().collect(),
        Some(s) => {
            let step = trigger
                .steps
                .iter()
                .find(|x| x.id == *s)
                .ok_or_else(|| format!("trigger `{}` has no step `{s}`", trigger.name))?;
            vec![step]
        }
    };
    let registry = CapabilityRegistry::default();
    let grant_config = args.opencode_order.grant_config();
    let ctx = args.context.context();
    let mut entries: Vec<Value> = Vec::new();
    let mut failed = false;
    for step in steps {
        // An agent chosen by an expression can be any named agent: show each.
        let agents: Vec<(Option<String>, palisade_schema::Agent)> = match &step.agent {
            AgentRef::Expression(_) => config
                .agents
                .iter()
                .map(|a| (Some(a.name.clone()), a.agent.clone()))
                .collect(),
            _ => {
                let a = static_agent(&config, step)
                    .ok_or_else(|| format!("step `{}` names an undefined agent", step.id))?;
                vec![(None, a.agent)]
            }
        };
        for (choice, agent) in agents {
            let mut entry = Map::new();
            entry.insert("step".into(), json!(step.id));
            if let Some(name) = choice {
                entry.insert("agent".into(), json!(name));
            }
            match grant_for(step, &agent, Some(&ctx), &registry, &grant_config) {
                Ok(g) => {
                    if let Value::Object(g) = g.to_json() {
                        entry.extend(g);
                    }
                }
                Err(err) => {
                    failed = true;
                    entry.insert("error".into(), err.to_json());
                }
            }
            entries.push(Value::Object(entry));
        }
    }
    let out = match args.format {
        Format::Json => {
            let doc = match (&args.step, entries.as_slice()) {
                (Some(_), [one]) if one.get("error").is_some() => json!({"error": one["error"]}),
                (Some(_), [one]) => one.clone(),
                _ => Value::Array(entries),
            };
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        }
        Format::Human => human(&trigger.name, &ctx, &entries),
    };
    println!("{out}");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn human(trigger: &str, ctx: &OutputContext, entries: &[Value]) -> String {
    let mut out = format!("trigger {trigger}, output context {}\n", ctx.provider);
    for e in entries {
        let step = e["step"].as_str().unwrap_or_default();
        let agent = e
            .get("agent")
            .and_then(Value::as_str)
            .map(|a| format!(" (agent {a})"))
            .unwrap_or_default();
        if let Some(err) = e.get("error") {
            out += &format!(
                "\nstep {step}{agent}: not dispatched\n  error {}: {}\n",
                err["code"].as_str().unwrap_or_default(),
                err["message"].as_str().unwrap_or_default()
            );
            continue;
        }
        let tools: Vec<&str> = e
            .pointer("/tool_policy/preapproved")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|t| t["tool"].as_str()).collect())
            .unwrap_or_default();
        out += &format!(
            "\nstep {step}{agent}: provider {}\n  preapproved hub tools: {}\n  provider options: {}\n  digest: {}\n",
            e["provider"].as_str().unwrap_or_default(),
            tools.join(", "),
            e["provider_options"],
            e["digest"].as_str().unwrap_or_default()
        );
    }
    out.trim_end().to_owned()
}

/// Loads and parses PATH (a repository root, a `.paseo` folder or a
/// single-file workflow); any error diagnostic fails the load.
pub(crate) fn load_config(path: &Path) -> Result<HubConfig, String> {
    let meta = fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let (config, diags) = if meta.is_file() {
        let bytes = read_capped(path)?;
        palisade_schema::parse_workflow_bytes(&path.display().to_string(), &bytes)
    } else {
        let root = if path.file_name().is_some_and(|n| n == ".paseo") {
            path.parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        } else if path.join(".paseo").is_dir() {
            path.to_path_buf()
        } else {
            return Err(format!(
                "{} holds no .paseo folder; give a repository root, a .paseo folder or a workflow file",
                path.display()
            ));
        };
        let mut files = Vec::new();
        collect(&root, ".paseo", 0, &mut files)?;
        files.sort();
        let mut loaded = Vec::new();
        for rel in files {
            let bytes = read_capped(&root.join(&rel))?;
            loaded.push((rel, bytes));
        }
        let refs: Vec<(&str, &[u8])> = loaded
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        palisade_schema::parse_bundle(&refs)
    };
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("{}:{}:{}: {}", d.file, d.line, d.column, d.message))
        .collect();
    match config {
        Some(c) if errors.is_empty() => Ok(c),
        _ => Err(format!(
            "{} does not parse ({} error(s); run `palisade check`):\n{}",
            path.display(),
            errors.len(),
            errors.join("\n")
        )),
    }
}

pub(crate) fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    let file = fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(READ_CAP.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > READ_CAP {
        return Err(format!(
            "{} is larger than {READ_CAP} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

/// `/`-separated paths of the files under `root/rel`, without following links.
fn collect(root: &Path, rel: &str, depth: usize, out: &mut Vec<String>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "{} nests deeper than {MAX_DEPTH} folders",
            root.join(rel).display()
        ));
    }
    let dir = root.join(rel);
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read {}: {e}", entry.path().display()))?;
        let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if kind.is_dir() {
            collect(root, &child, depth.saturating_add(1), out)?;
        } else if kind.is_file() {
            if out.len() >= MAX_FILES {
                return Err(format!(
                    "{} holds more than {MAX_FILES} files",
                    root.join(".paseo").display()
                ));
            }
            out.push(child);
        } else {
            return Err(format!(
                "{} is a symbolic link or special file; palisade does not follow links inside .paseo",
                root.join(&child).display()
            ));
        }
    }
    Ok(())
}
