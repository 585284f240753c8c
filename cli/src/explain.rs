//! `palisade explain`: the run plan for an event: admitted or rejected (with
//! the reason), which steps run, wait or are skipped, and each running step's
//! tools.

use std::path::PathBuf;
use std::process::ExitCode;

use palisade_policy::admission::{Admission, TriggerEvent};
use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::plan::{PlanInput, RunPlan, StepStatus, plan};
use serde_json::{Map, Value, json};

use crate::bundle::{Loaded, load};
use crate::policy_cmd::{Format, Ordering, document_context, tool_labels};
use palisade_policy::plan::plan_document;
use palisade_policy::trigger;
use palisade_schema::trigger::{Release, TriggerDocument, internal_trigger_name};

/// Arguments of `palisade explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root, a `.paseo` folder, or a single-file workflow.
    path: PathBuf,
    /// The event, as JSON (see docs/tool-authority.md).
    #[arg(long)]
    event: PathBuf,
    /// Outputs of a step that finished: `STEP=OUTPUT.json` (repeatable).
    #[arg(long = "output", value_name = "STEP=OUTPUT.json")]
    outputs: Vec<String>,
    /// Only this trigger (default: every trigger on the event's name).
    #[arg(long)]
    trigger: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Where OpenCode grant rules go relative to authored rules.
    #[arg(long, value_enum, default_value_t = Ordering::GrantsFirst)]
    opencode_order: Ordering,
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let loaded = load(&args.path)?;
    let event_json = read_json(&args.event)?;
    let (event, context) =
        parse_event(&event_json).map_err(|e| format!("{}: {e}", args.event.display()))?;
    let mut outputs = Vec::new();
    for spec in &args.outputs {
        let (step, file) = spec
            .split_once('=')
            .ok_or_else(|| format!("--output `{spec}` must be STEP=OUTPUT.json"))?;
        outputs.push((step.to_owned(), read_json(&PathBuf::from(file))?));
    }
    let config = match loaded {
        Loaded::Workflow(c) => c,
        Loaded::Triggers(docs) => {
            return run_documents(&args, &docs, &event, context.as_ref(), &outputs);
        }
    };
    let names: Vec<String> = match &args.trigger {
        Some(t) => vec![t.clone()],
        None => config
            .triggers
            .iter()
            .filter(|t| t.on == event.name)
            .map(|t| t.name.clone())
            .collect(),
    };
    if names.is_empty() {
        return Err(format!("no trigger starts on `{}` events", event.name));
    }
    let registry = CapabilityRegistry::default();
    let grant_config = args.opencode_order.grant_config();
    let mut plans = Vec::new();
    for name in &names {
        let input = PlanInput {
            config: &config,
            trigger: name,
            event: &event,
            outputs: &outputs,
            context: context.as_ref(),
        };
        plans.push(plan(&input, &registry, &grant_config).map_err(|e| e.to_string())?);
    }
    let any_admitted = plans.iter().any(|p| p.admission.is_admitted());
    let out = match args.format {
        Format::Json => {
            serde_json::to_string_pretty(&Value::Array(plans.iter().map(plan_json).collect()))
                .map_err(|e| e.to_string())?
        }
        Format::Human => plans.iter().map(human).collect::<Vec<_>>().join("\n\n"),
    };
    println!("{out}");
    Ok(if any_admitted {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `palisade explain` on trigger documents: every `on` entry on the
/// event's name (or the one `--trigger` names), planned through the
/// document's compiled form with its automatic reply.
fn run_documents(
    args: &Args,
    docs: &[TriggerDocument],
    event: &TriggerEvent,
    context: Option<&OutputContext>,
    outputs: &[(String, Value)],
) -> Result<ExitCode, String> {
    let selected: Vec<(usize, usize)> = match &args.trigger {
        Some(t) => vec![trigger::select(docs, t, Some(&event.name)).map_err(|e| e.to_string())?],
        None => docs
            .iter()
            .enumerate()
            .flat_map(|(d, doc)| {
                doc.on
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.event == event.name)
                    .map(move |(i, _)| (d, i))
            })
            .collect(),
    };
    if selected.is_empty() {
        return Err(format!(
            "no trigger document starts on `{}` events",
            event.name
        ));
    }
    let release = Release::default();
    let registry = CapabilityRegistry::hub_0_9();
    let grant_config = args.opencode_order.grant_config();
    let mut plans = Vec::new();
    for (d, i) in selected {
        let doc = docs.get(d).ok_or("no such trigger document")?;
        let entry = doc.on.get(i).ok_or("no such on entry")?;
        let ctx = document_context(context.cloned(), &entry.event);
        let compiled = doc.compile();
        let name = internal_trigger_name(&doc.name, i);
        let input = PlanInput {
            config: &compiled,
            trigger: &name,
            event,
            outputs,
            context: Some(&ctx),
        };
        let p = plan_document(doc, i, &input, &registry, &grant_config, release)
            .map_err(|e| e.to_string())?;
        plans.push((doc.name.clone(), p));
    }
    let any_admitted = plans.iter().any(|(_, p)| p.admission.is_admitted());
    let out = match args.format {
        Format::Json => serde_json::to_string_pretty(&Value::Array(
            plans
                .iter()
                .map(|(doc, p)| {
                    let mut v = plan_json(p);
                    if let Value::Object(m) = &mut v {
                        m.insert("document".into(), json!(doc));
                    }
                    v
                })
                .collect(),
        ))
        .map_err(|e| e.to_string())?,
        Format::Human => plans
            .iter()
            .map(|(doc, p)| format!("trigger document {doc}: {}", human_with(p, true)))
            .collect::<Vec<_>>()
            .join("\n\n"),
    };
    println!("{out}");
    Ok(if any_admitted {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn read_json(path: &std::path::Path) -> Result<Value, String> {
    let bytes = crate::input::read(path, crate::input::Kind::Event)?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: invalid JSON: {e}", path.display()))
}

/// Parses the event file; unknown keys are errors, so a typo cannot silently
/// drop a field that admission would have checked.
fn parse_event(v: &Value) -> Result<(TriggerEvent, Option<OutputContext>), String> {
    let Value::Object(m) = v else {
        return Err("the event must be a JSON object".into());
    };
    let mut e = TriggerEvent::default();
    let mut context = None;
    let mut item = None;
    let text = |k: &str, v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("`{k}` must be a string"))
    };
    let list = |k: &str, v: &Value| -> Result<Vec<String>, String> {
        v.as_array()
            .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| format!("`{k}` must be a list of strings"))
    };
    for (k, val) in m {
        match k.as_str() {
            "event" => e.name = text(k, val)?,
            "actor_id" => e.actor_id = Some(text(k, val)?),
            "actor_name" => e.actor_name = Some(text(k, val)?),
            "actor_is_bot" => {
                e.actor_is_bot = val.as_bool().ok_or("`actor_is_bot` must be a boolean")?
            }
            "connection" => e.connection = Some(text(k, val)?),
            "workspace" => e.workspace = Some(text(k, val)?),
            "guild" => e.guild = Some(text(k, val)?),
            "channel" => e.channel = Some(text(k, val)?),
            "parent_channel" => e.parent_channel = Some(text(k, val)?),
            "repository" => e.repository = Some(text(k, val)?),
            "text" => e.text = text(k, val)?,
            "bot_mentions" => e.bot_mentions = list(k, val)?,
            "label" => e.label = Some(text(k, val)?),
            "labels" => e.labels = list(k, val)?,
            "inputs" => {
                let Value::Object(inputs) = val else {
                    return Err("`inputs` must be an object".into());
                };
                e.inputs = inputs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            }
            "context" => context = Some(OutputContext::new(text(k, val)?)),
            "item" => {
                item = Some(val.as_bool().ok_or("`item` must be a boolean")?);
            }
            other => return Err(format!("unknown event key `{other}`")),
        }
    }
    if e.name.is_empty() {
        return Err("the event needs `event`, e.g. \"slack.mention\"".into());
    }
    // `item`: whether the run has an issue or pull request to reply on
    // (default: every GitHub event but `github.push`).
    if let Some(item) = item {
        let ctx = context.unwrap_or_else(|| OutputContext::for_event(&e.name));
        context = Some(ctx.with_item(item));
    }
    Ok((e, context))
}

fn plan_json(p: &RunPlan) -> Value {
    let admission = match &p.admission {
        Admission::Admitted { prompt } => json!({"admitted": true, "prompt": prompt}),
        Admission::Rejected(r) => json!({"admitted": false, "code": r.code, "reason": r.message}),
    };
    let steps: Vec<Value> = p
        .steps
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("step".into(), json!(s.id));
            match &s.status {
                StepStatus::Run(r) => {
                    m.insert("status".into(), json!("run"));
                    m.insert("environment".into(), json!(r.environment));
                    m.insert(
                        "agent".into(),
                        r.agent.name.as_ref().map_or(Value::Null, |n| json!(n)),
                    );
                    m.insert("provider".into(), json!(r.agent.agent.provider));
                    match &r.grant {
                        Ok(g) => {
                            m.insert(
                                "tools".into(),
                                json!(g.derived.policy.tool_names().collect::<Vec<_>>()),
                            );
                            m.insert(
                                "grants".into(),
                                Value::Array(
                                    g.derived
                                        .materialized
                                        .iter()
                                        .map(|x| json!({"type": x.decl.kind, "tool": x.tool.name, "max": x.decl.max, "required": x.decl.required, "automatic": x.decl.max.is_none()}))
                                        .collect(),
                                ),
                            );
                            m.insert("grant".into(), g.to_json());
                        }
                        Err(e) => {
                            m.insert("error".into(), e.to_json());
                        }
                    }
                }
                StepStatus::Skipped => {
                    m.insert("status".into(), json!("skipped"));
                    m.insert("reason".into(), json!("condition_false"));
                }
                StepStatus::Waiting { on } => {
                    m.insert("status".into(), json!("waiting"));
                    m.insert("on".into(), json!(on));
                }
                StepStatus::Failed { reason } => {
                    m.insert("status".into(), json!("failed"));
                    m.insert("reason".into(), json!(reason));
                }
                _ => {
                    m.insert("status".into(), json!("not_run"));
                }
            }
            Value::Object(m)
        })
        .collect();
    json!({"trigger": p.trigger, "context": p.context.provider, "admission": admission, "steps": steps})
}

fn human(p: &RunPlan) -> String {
    human_with(p, false)
}

/// The plan as text; `labels` lists each output tool with its limit
/// (trigger documents, where a reply can be automatic and unlimited).
fn human_with(p: &RunPlan, labels: bool) -> String {
    let mut out = format!(
        "trigger {} (output context {})\n",
        p.trigger, p.context.provider
    );
    match &p.admission {
        Admission::Admitted { .. } => out += "  admitted\n",
        Admission::Rejected(r) => out += &format!("  rejected ({}): {}\n", r.code, r.message),
    }
    for s in &p.steps {
        let line = match &s.status {
            StepStatus::Run(r) => match &r.grant {
                Ok(g) => format!(
                    "runs on {} with {} ({}); tools: {}",
                    r.environment,
                    r.agent.name.as_deref().unwrap_or("inline agent"),
                    r.agent.agent.provider,
                    if labels {
                        tool_labels(g)
                    } else {
                        g.derived.policy.tool_names().collect::<Vec<_>>().join(", ")
                    }
                ),
                Err(e) => format!("cannot be dispatched: {} ({})", e, e.code()),
            },
            StepStatus::Skipped => "skipped (condition_false)".to_owned(),
            StepStatus::Waiting { on } => format!("waits for the output of step {on}"),
            StepStatus::Failed { reason } => format!("fails: {reason}"),
            _ => "not run".to_owned(),
        };
        out += &format!("  step {}: {line}\n", s.id);
    }
    out.trim_end().to_owned()
}
