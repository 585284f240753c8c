//! The run plan: given a parsed workflow, an event and the outputs of the
//! steps that already finished, which steps run or are skipped, where each
//! runs, which agent runs it, and each running step's exact grant.
//!
//! The plan is computed step by step, as the Hub runs them: a step whose `if`
//! reads the output of an earlier step that has not reported yet is
//! [`StepStatus::Waiting`]; call [`plan`] again with more outputs to advance.
//! Skipped steps and steps that could not be resolved never get a grant.

use palisade_schema::expr::{EvalError, Template, truthy};
use palisade_schema::trigger::{Release, TriggerDocument, internal_trigger_name};
use palisade_schema::{
    Agent, AgentRef, EnvironmentKind, EnvironmentRef, HubConfig, InputType, Step, Trigger,
};
use serde_json::{Map, Value, json};

use crate::admission::{self, Admission, TriggerEvent};
use crate::capability::{CapabilityRegistry, OutputContext};
use crate::derive::OutputDecl;
use crate::grant::{GrantConfig, StepError, StepGrant, StepInput, grant_step};
use crate::invocation::{self, InputKind, InputSpec, Invocation, InvocationError};

/// What a plan is computed from.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    /// The parsed configuration.
    pub config: &'a HubConfig,
    /// The trigger's name.
    pub trigger: &'a str,
    /// The incoming event.
    pub event: &'a TriggerEvent,
    /// `(step id, outputs)` of the earlier steps that succeeded.
    pub outputs: &'a [(String, Value)],
    /// The run's output context; `None` derives it from the event's provider.
    pub context: Option<&'a OutputContext>,
}

/// A resolved agent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ResolvedAgent {
    /// The named agent's name, or `None` for an inline agent.
    pub name: Option<String>,
    /// The definition.
    pub agent: Agent,
}

/// What happens to one step.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StepStatus {
    /// The step runs.
    Run(Box<RunStep>),
    /// The step's `if` is false (`condition_false`).
    Skipped,
    /// The step's `if` reads the output of a step that has not reported.
    Waiting {
        /// The step whose output is needed.
        on: String,
    },
    /// The step cannot run: its condition, environment or agent did not resolve.
    Failed {
        /// Why.
        reason: String,
    },
    /// The run was not admitted.
    NotRun,
}

/// A step that runs: where, with which agent, and with which grant.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunStep {
    /// The daemon environment's name.
    pub environment: String,
    /// The agent.
    pub agent: ResolvedAgent,
    /// The exact grant, or why the step cannot be dispatched.
    pub grant: Result<StepGrant, StepError>,
}

/// One step of the plan.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StepPlan {
    /// The step id.
    pub id: String,
    /// What happens to it.
    pub status: StepStatus,
}

/// The plan of one run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunPlan {
    /// The trigger's name.
    pub trigger: String,
    /// The admission decision.
    pub admission: Admission,
    /// The output context the steps were derived for.
    pub context: OutputContext,
    /// One entry per step, in order.
    pub steps: Vec<StepPlan>,
}

/// Why no plan could be made.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanError {
    /// No trigger has that name.
    #[error("no trigger named `{name}`")]
    UnknownTrigger {
        /// The name.
        name: String,
    },
}

/// The output context a run gets from its event ([`OutputContext::for_event`]).
pub fn context_for(event: &TriggerEvent) -> OutputContext {
    OutputContext::for_event(&event.name)
}

/// Finds a trigger by name.
///
/// # Errors
///
/// [`PlanError::UnknownTrigger`].
pub fn find_trigger<'a>(config: &'a HubConfig, name: &str) -> Result<&'a Trigger, PlanError> {
    config
        .triggers
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| PlanError::UnknownTrigger {
            name: name.to_owned(),
        })
}

/// A step's `allow_outputs` as declarations.
pub fn decls_of(step: &Step) -> Vec<OutputDecl> {
    step.allow_outputs
        .iter()
        .map(|a| OutputDecl {
            kind: a.kind.clone(),
            max: a.max,
            required: a.required,
        })
        .collect()
}

/// The agent a step names, for steps whose agent is not an expression.
pub fn static_agent(config: &HubConfig, step: &Step) -> Option<ResolvedAgent> {
    match &step.agent {
        AgentRef::Named(n) => config.agent(n).map(|a| ResolvedAgent {
            name: Some(n.clone()),
            agent: a.clone(),
        }),
        AgentRef::Inline(a) => Some(ResolvedAgent {
            name: None,
            agent: a.clone(),
        }),
        AgentRef::Expression(_) => None,
    }
}

/// The grant of one step for an agent, in a context.
///
/// # Errors
///
/// The step cannot be dispatched ([`StepError`]).
pub fn grant_for(
    step: &Step,
    agent: &Agent,
    ctx: Option<&OutputContext>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
) -> Result<StepGrant, StepError> {
    grant_with(step, agent, ctx, registry, config, &[])
}

/// [`grant_for`] with `extra` declarations after the step's own (a trigger
/// document's automatic reply).
fn grant_with(
    step: &Step,
    agent: &Agent,
    ctx: Option<&OutputContext>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
    extra: &[OutputDecl],
) -> Result<StepGrant, StepError> {
    let mut decls = decls_of(step);
    decls.extend_from_slice(extra);
    grant_step(
        &StepInput {
            provider: &agent.provider,
            options: agent.options.as_ref(),
            allow_outputs: &decls,
            output_schema: step.output_schema.as_ref(),
        },
        ctx,
        registry,
        config,
    )
}

/// Computes the run plan.
///
/// # Errors
///
/// [`PlanError::UnknownTrigger`]; everything else is reported per step.
pub fn plan(
    input: &PlanInput<'_>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
) -> Result<RunPlan, PlanError> {
    plan_inner(input, registry, config, &[], false)
}

/// The run plan of `on` entry `index` of a trigger document: the document
/// is compiled to its v0.6 form ([`TriggerDocument::compile`]) and planned
/// as [`plan`] does, with the entry's automatic reply
/// ([`crate::trigger::event_decls`]) after the authored grants, in the
/// context of the event (or `input.context`), with the Hub 0.9 registry
/// the caller passes ([`CapabilityRegistry::hub_0_9`]), admitted as Hub 0.9
/// admits (a `"*"` in `from_users` is everyone). `input.config` and
/// `input.trigger` are ignored.
///
/// # Errors
///
/// [`PlanError::UnknownTrigger`] when there is no such entry.
pub fn plan_document(
    doc: &TriggerDocument,
    index: usize,
    input: &PlanInput<'_>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
    release: Release,
) -> Result<RunPlan, PlanError> {
    let name = internal_trigger_name(&doc.name, index);
    let Some(entry) = doc.on.get(index) else {
        return Err(PlanError::UnknownTrigger { name });
    };
    let compiled = doc.compile();
    let all = crate::trigger::event_decls(&entry.event, &[], release);
    let authored = crate::trigger::authored_decls(&doc.run.outputs);
    let automatic: Vec<OutputDecl> = all
        .into_iter()
        .filter(|d| !authored.iter().any(|a| a.kind == d.kind))
        .collect();
    let own = OutputContext::for_event(&entry.event);
    let inner = PlanInput {
        config: &compiled,
        trigger: &name,
        event: input.event,
        outputs: input.outputs,
        context: Some(input.context.unwrap_or(&own)),
    };
    plan_inner(&inner, registry, config, &automatic, true)
}

/// `extra`: declarations after each step's own; `hub_0_9`: admit as Hub 0.9
/// ([`admission::admit_0_9`]).
fn plan_inner(
    input: &PlanInput<'_>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
    extra: &[OutputDecl],
    hub_0_9: bool,
) -> Result<RunPlan, PlanError> {
    let trigger = find_trigger(input.config, input.trigger)?;
    let context = input
        .context
        .cloned()
        .unwrap_or_else(|| context_for(input.event));
    let filters = trigger.filters.as_ref();
    let mut event = input.event.clone();
    let invocation = match invocation_for(trigger, filters, &event) {
        Ok(inv) => inv,
        Err(e) => {
            let admission = Admission::Rejected(admission::Rejection {
                code: e.code(),
                message: e.to_string(),
            });
            return Ok(not_run(trigger, admission, context));
        }
    };
    if let Some(inv) = &invocation {
        event.inputs.clone_from(&inv.inputs);
    }
    let mut admission = if hub_0_9 {
        admission::admit_0_9(&trigger.on, filters, &event)
    } else {
        admission::admit(&trigger.on, filters, &event)
    };
    if let (Admission::Admitted { prompt }, Some(inv)) = (&mut admission, &invocation) {
        prompt.clone_from(&inv.prompt);
    }
    let Admission::Admitted { prompt } = &admission else {
        let steps = trigger
            .steps
            .iter()
            .map(|s| StepPlan {
                id: s.id.clone(),
                status: StepStatus::NotRun,
            })
            .collect();
        return Ok(RunPlan {
            trigger: trigger.name.clone(),
            admission,
            context,
            steps,
        });
    };
    let mut ctx = eval_context(trigger, &event, prompt);
    let mut steps: Vec<StepPlan> = Vec::new();
    for step in &trigger.steps {
        let status = step_status(input, step, &ctx, &steps, &context, registry, config, extra);
        if matches!(status, StepStatus::Run(_))
            && let Some((_, out)) = input.outputs.iter().find(|(id, _)| *id == step.id)
            && let Some(Value::Object(s)) = ctx.get_mut("steps")
        {
            s.insert(step.id.clone(), json!({ "outputs": out }));
        }
        steps.push(StepPlan {
            id: step.id.clone(),
            status,
        });
    }
    Ok(RunPlan {
        trigger: trigger.name.clone(),
        admission,
        context,
        steps,
    })
}

#[allow(clippy::too_many_arguments, reason = "internal; one call site")]
fn step_status(
    input: &PlanInput<'_>,
    step: &Step,
    ctx: &Value,
    earlier: &[StepPlan],
    context: &OutputContext,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
    extra: &[OutputDecl],
) -> StepStatus {
    let unavailable = |e: EvalError, what: &str| -> StepStatus {
        // Any other evaluation error fails the step.
        let dep = match &e {
            EvalError::OutputUnavailable { step } => Some(step),
            _ => None,
        };
        let waits_on = dep.filter(|dep| {
            earlier
                .iter()
                .any(|p| p.id == **dep && matches!(p.status, StepStatus::Run(_)))
        });
        if let Some(dep) = waits_on {
            StepStatus::Waiting { on: dep.clone() }
        } else {
            StepStatus::Failed {
                reason: format!("step {} {what}: {e}", step.id),
            }
        }
    };
    if let Some(cond) = &step.condition {
        match cond.eval(ctx) {
            Ok(v) if !truthy(&v) => return StepStatus::Skipped,
            Ok(_) => {}
            Err(e) => return unavailable(e, "if"),
        }
    }
    let environment = match &step.environment {
        EnvironmentRef::Named(n) => n.clone(),
        EnvironmentRef::Expression(t) => match eval_name(t, ctx) {
            Ok(n) => n,
            Err(Ok(e)) => return unavailable(e, "environment"),
            Err(Err(reason)) => {
                return StepStatus::Failed {
                    reason: format!("step {} environment {reason}", step.id),
                };
            }
        },
    };
    match input.config.environment(&environment).map(|e| &e.kind) {
        Some(EnvironmentKind::Daemon { .. }) => {}
        Some(_) => {
            return StepStatus::Failed {
                reason: format!(
                    "step {} environment `{environment}` must be a daemon environment",
                    step.id
                ),
            };
        }
        None => {
            return StepStatus::Failed {
                reason: format!(
                    "step {} environment `{environment}` is not defined",
                    step.id
                ),
            };
        }
    }
    let agent = match &step.agent {
        AgentRef::Expression(t) => match eval_name(t, ctx) {
            Ok(n) => match input.config.agent(&n) {
                Some(a) => ResolvedAgent {
                    name: Some(n),
                    agent: a.clone(),
                },
                None => {
                    return StepStatus::Failed {
                        reason: format!("step {} agent `{n}` is not a named agent", step.id),
                    };
                }
            },
            Err(Ok(e)) => return unavailable(e, "agent"),
            Err(Err(reason)) => {
                return StepStatus::Failed {
                    reason: format!("step {} agent {reason}", step.id),
                };
            }
        },
        _ => match static_agent(input.config, step) {
            Some(a) => a,
            None => {
                return StepStatus::Failed {
                    reason: format!("step {} names an undefined agent", step.id),
                };
            }
        },
    };
    let grant = grant_with(step, &agent.agent, Some(context), registry, config, extra);
    StepStatus::Run(Box::new(RunStep {
        environment,
        agent,
        grant,
    }))
}

fn not_run(trigger: &Trigger, admission: Admission, context: OutputContext) -> RunPlan {
    let steps = trigger
        .steps
        .iter()
        .map(|s| StepPlan {
            id: s.id.clone(),
            status: StepStatus::NotRun,
        })
        .collect();
    RunPlan {
        trigger: trigger.name.clone(),
        admission,
        context,
        steps,
    }
}

/// The declared inputs of a trigger, as invocation specs.
pub fn input_specs(trigger: &Trigger) -> Vec<InputSpec> {
    trigger
        .inputs
        .iter()
        .map(|d| InputSpec {
            name: d.name.clone(),
            kind: match d.kind {
                InputType::String => InputKind::String,
                InputType::Number => InputKind::Number,
                InputType::Boolean => InputKind::Boolean,
            },
            required: d.required.unwrap_or(false),
            default: d.default.clone(),
            choices: d.choices.clone(),
        })
        .collect()
}

/// Parses the invocation inputs of a message event (after the bot mention
/// and after the trigger's `pattern`/`contains` marker, which is removed from
/// the prompt). `None` when the trigger declares no inputs, or when the
/// event carries structured inputs already (manual runs): those are checked
/// by the same rules ([`invocation::check_structured`]).
///
/// # Errors
///
/// The invocation's rejection.
pub fn invocation_for(
    trigger: &Trigger,
    filters: Option<&admission::Filters>,
    event: &TriggerEvent,
) -> Result<Option<Invocation>, InvocationError> {
    let specs = input_specs(trigger);
    if specs.is_empty() {
        return Ok(None);
    }
    if !event.inputs.is_empty() || trigger.source() == "manual" {
        let inputs = invocation::check_structured(&event.inputs, &specs)?;
        return Ok(Some(Invocation {
            inputs,
            prompt: event.text.clone(),
        }));
    }
    let body = match trigger.source() {
        "slack" | "discord" => {
            admission::after_mention(&event.text, &event.bot_mentions).unwrap_or_default()
        }
        _ => event.text.as_str(),
    };
    let mut body = body.trim_start();
    let marker = filters.and_then(|f| f.pattern.as_ref().or(f.contains.as_ref()));
    if let Some(m) = marker
        && admission::starts_with_word(body, m)
    {
        body = body.get(m.len()..).unwrap_or_default();
    }
    invocation::parse(body, &specs).map(Some)
}

/// Evaluates an authority-bearing name: `Err(Ok)` for unavailable outputs,
/// `Err(Err)` for a value that is not a non-empty string.
fn eval_name(t: &Template, ctx: &Value) -> Result<String, Result<EvalError, String>> {
    match t.eval(ctx) {
        Ok(Value::String(s)) if !s.is_empty() => Ok(s),
        Ok(other) => Err(Err(format!("evaluated to {other}, not a name"))),
        Err(e) => Err(Ok(e)),
    }
}

/// The expression context: `paseo.prompt`, `paseo.inputs`, `values`, `steps`.
fn eval_context(trigger: &Trigger, event: &TriggerEvent, prompt: &str) -> Value {
    let mut inputs = Map::new();
    for decl in &trigger.inputs {
        let given = event
            .inputs
            .iter()
            .find(|(n, _)| *n == decl.name)
            .map(|(_, v)| v.clone());
        inputs.insert(
            decl.name.clone(),
            given
                .or_else(|| decl.default.clone())
                .unwrap_or(Value::Null),
        );
    }
    let mut ctx = json!({
        "paseo": {"prompt": prompt, "inputs": inputs},
        "values": {},
        "steps": {},
    });
    // Values may refer to each other (cycles are rejected by the parser):
    // evaluate in passes until every value that can be computed is.
    for _ in 0..=trigger.values.len() {
        let mut computed = Map::new();
        for (name, t) in &trigger.values {
            if let Ok(v) = t.eval(&ctx) {
                computed.insert(name.clone(), v);
            }
        }
        if ctx.get("values").and_then(Value::as_object) == Some(&computed) {
            break;
        }
        if let Some(slot) = ctx.get_mut("values") {
            *slot = Value::Object(computed);
        }
    }
    ctx
}
