//! `palisade policy`: the exact tool policy and provider options of each step
//! of a trigger, for an output context, as a dispatcher would send them.
//! For a Paseo Hub 0.9 trigger document, of its one step `run` for one `on`
//! entry (`--event`, or the internal trigger name), with the automatic
//! reply shown as such.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::grant::GrantConfig;
use palisade_policy::plan::{find_trigger, grant_for, static_agent};
use palisade_policy::translate::OpenCodeOrdering;
use palisade_policy::trigger;
use palisade_schema::AgentRef;
use palisade_schema::trigger::{Release, TriggerDocument, internal_trigger_name};
use serde_json::{Map, Value, json};

use crate::bundle::{Loaded, load};

/// Arguments of `palisade policy`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root, a `.paseo` folder, a single-file workflow, or a
    /// trigger document (a root with `.paseo/triggers/` loads those).
    path: PathBuf,
    /// The trigger (workflow) name; for trigger documents, the document's
    /// `name` or an internal trigger name (`NAME-event-2`).
    #[arg(long)]
    trigger: String,
    /// Trigger documents: the `on` entry (event name, e.g. `slack.mention`);
    /// needed when the document has several and `--trigger` is its name.
    #[arg(long)]
    event: Option<String>,
    /// Only this step (a trigger document's one step is `run`).
    #[arg(long)]
    step: Option<String>,
    /// The run's output context (where outputs would go). Required for a
    /// workflow; a trigger document's run defaults to its event's context.
    #[arg(long, value_enum)]
    context: Option<ContextArg>,
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
    /// A Linear issue (trigger documents).
    Linear,
    /// A manual run.
    Manual,
}

impl ContextArg {
    fn context(self) -> OutputContext {
        OutputContext::new(match self {
            Self::Slack => "slack",
            Self::Discord => "discord",
            Self::Github => "github",
            Self::Linear => "linear",
            Self::Manual => "manual",
        })
    }
}

/// The context of a trigger-document run of `event`: the event's own
/// (a `github.push` has no item to reply on) unless another one is asked.
pub(crate) fn document_context(asked: Option<OutputContext>, event: &str) -> OutputContext {
    let own = OutputContext::for_event(event);
    match asked {
        Some(c) if c.provider != own.provider => c,
        // The same provider: an asked context can only take the item away.
        Some(c) => {
            let item = own.item && c.item;
            own.with_item(item)
        }
        None => own,
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
    let config = match load(&args.path)? {
        Loaded::Workflow(c) => c,
        Loaded::Triggers(docs) => return run_document(&args, &docs),
    };
    if args.event.is_some() {
        return Err("--event selects an `on` entry of a trigger document; a v0.6 workflow has one event per trigger".into());
    }
    let Some(context) = args.context else {
        return Err(
            "--context is required for a v0.6 workflow (slack, discord, github or manual)".into(),
        );
    };
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
    let ctx = context.context();
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

/// The grants of a trigger-document run as JSON: each with its tool (or
/// `null` when unavailable in the context), `max` (`null`: unlimited) and
/// whether it is the automatic reply.
pub(crate) fn grants_json(
    decls: &[palisade_policy::derive::OutputDecl],
    registry: &CapabilityRegistry,
    ctx: &OutputContext,
) -> Value {
    Value::Array(
        decls
            .iter()
            .map(|d| {
                let tool = registry
                    .get(&d.kind)
                    .filter(|c| c.availability.is_available(Some(ctx)))
                    .map(|c| c.tool.name.clone());
                json!({"type": d.kind, "max": d.max, "required": d.required,
                       "automatic": trigger::is_automatic(d), "tool": tool})
            })
            .collect(),
    )
}

/// `finish_execution, reply (automatic, unlimited; slack.reply)`: the
/// preapproved tools with each output tool's limit.
pub(crate) fn tool_labels(grant: &palisade_policy::grant::StepGrant) -> String {
    let mut labels = vec![palisade_policy::derive::FINISH_EXECUTION.to_owned()];
    labels.extend(
        grant
            .derived
            .materialized
            .iter()
            .map(|m| trigger::describe_grant(&m.tool.name, &m.decl)),
    );
    labels.join(", ")
}

/// `palisade policy` on trigger documents.
fn run_document(args: &Args, docs: &[TriggerDocument]) -> Result<ExitCode, String> {
    let (d, index) =
        trigger::select(docs, &args.trigger, args.event.as_deref()).map_err(|e| e.to_string())?;
    let doc = docs.get(d).ok_or("no such trigger document")?;
    let entry = doc.on.get(index).ok_or("no such on entry")?;
    if let Some(step) = &args.step
        && step != trigger::STEP_ID
    {
        return Err(format!(
            "trigger document `{}` has one step, `{}`, not `{step}`",
            doc.name,
            trigger::STEP_ID
        ));
    }
    let release = Release::default();
    let registry = CapabilityRegistry::hub_0_9();
    let grant_config = args.opencode_order.grant_config();
    let ctx = document_context(args.context.map(ContextArg::context), &entry.event);
    let decls = trigger::entry_decls(doc, index, release).unwrap_or_default();
    let internal = internal_trigger_name(&doc.name, index);
    let mut entries: Vec<Value> = Vec::new();
    let mut failed = false;
    for (choice, agent) in trigger::agents(doc) {
        let mut entry = Map::new();
        entry.insert("step".into(), json!(trigger::STEP_ID));
        if let Some(name) = choice {
            entry.insert("agent".into(), json!(name));
        }
        entry.insert("grants".into(), grants_json(&decls, &registry, &ctx));
        match trigger::grant_entry(doc, index, agent, &ctx, &registry, &grant_config, release) {
            Ok(g) => {
                entry.insert("tools".into(), json!(tool_labels(&g)));
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
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&json!({
            "document": doc.name, "event": entry.event, "trigger": internal,
            "context": ctx.provider, "steps": entries,
        }))
        .map_err(|e| e.to_string())?,
        Format::Human => {
            let mut out = format!(
                "trigger document {}, on {} (internal trigger {internal}), output context {}\n",
                doc.name, entry.event, ctx.provider
            );
            for e in &entries {
                let agent = e
                    .get("agent")
                    .and_then(Value::as_str)
                    .map(|a| format!(" (agent {a})"))
                    .unwrap_or_default();
                let grants: Vec<String> = e["grants"]
                    .as_array()
                    .map(|a| a.iter().map(grant_line).collect())
                    .unwrap_or_default();
                let grants = if grants.is_empty() {
                    "none".to_owned()
                } else {
                    grants.join("; ")
                };
                if let Some(err) = e.get("error") {
                    out += &format!(
                        "\nstep run{agent}: not dispatched\n  grants: {grants}\n  error {}: {}\n",
                        err["code"].as_str().unwrap_or_default(),
                        err["message"].as_str().unwrap_or_default()
                    );
                    continue;
                }
                out += &format!(
                    "\nstep run{agent}: provider {}\n  grants: {grants}\n  preapproved hub tools: {}\n  provider options: {}\n  digest: {}\n",
                    e["provider"].as_str().unwrap_or_default(),
                    e["tools"].as_str().unwrap_or_default(),
                    e["provider_options"],
                    e["digest"].as_str().unwrap_or_default()
                );
            }
            out.trim_end().to_owned()
        }
    };
    println!("{out}");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `slack.reply: unlimited (automatic) -> reply`, as one grant reads.
fn grant_line(g: &Value) -> String {
    let limit = match g["max"].as_u64() {
        None => "unlimited (automatic)".to_owned(),
        Some(n) => format!("max {n}"),
    };
    let required = if g["required"].as_bool() == Some(true) {
        ", required"
    } else {
        ""
    };
    let tool = g["tool"]
        .as_str()
        .map_or_else(|| "unavailable here".to_owned(), |t| format!("tool {t}"));
    format!(
        "{} {limit}{required}, {tool}",
        g["type"].as_str().unwrap_or_default()
    )
}
