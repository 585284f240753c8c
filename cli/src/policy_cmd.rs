//! `palisade policy`: the exact tool policy and provider options of each step
//! of a trigger, for an output context, as a dispatcher would send them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::grant::GrantConfig;
use palisade_policy::plan::{find_trigger, grant_for, static_agent};
use palisade_policy::translate::OpenCodeOrdering;
use palisade_schema::AgentRef;
use serde_json::{Map, Value, json};

use crate::bundle::load_config;

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
        GrantConfig::default().with_opencode_ordering(match self {
            Self::GrantsFirst => OpenCodeOrdering::GrantsFirst,
            Self::GrantsLast => OpenCodeOrdering::GrantsLast,
        })
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
