//! The shared state of one governed session: the host policy, the sticky
//! taint session, the sealed journal and the steering watch, behind one
//! type that is at the same time the proxy's [`Decider`] and [`Recorder`]
//! and the control channel's [`ControlBackend`].
//!
//! Because the proxy asks [`SessionCore::decide`] for every new connection
//! and reads the same taint state that [`ControlBackend::taint`] changes
//! under the same lock, a taint report switches the proxy to the tainted
//! rules before the worker even gets its answer.
//!
//! The same state takes the read observer's opens
//! ([`SessionCore::observed_read`]: taint and routing recorded before the
//! open is allowed) and answers the relays' [`RelayGate`]: once the session
//! read a path whose `[[routing]]` rules keep it from a provider, that
//! provider's relays and its API hosts through the proxy are refused.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_egress::control::{
    AskAnswer, CheckpointSummary, ControlBackend, ControlServer, Endpoint, OutwardAction,
    OutwardAnswer, OutwardResult, PendingAction, PolicyAnswer, SessionView, TaintEntry, TaintKind,
};
use palisade_egress::decide::Decider;
use palisade_egress::record::{Acceptance, ProxyEvent, Recorder};
use palisade_egress::relay::{OutwardFuture, RelayGate, RouteRefusal, ServerToolResult};
use palisade_evidence::{Body, Entry, Flags, JournalWriter, Kind, Timestamp};
use palisade_isolate::observe::{Attribution, Response};
use palisade_isolate::stage::{CommitFilter, Stage};
use palisade_policy::egress::decide_host;
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use palisade_policy::route::{ProviderHosts, RouteTable};
use palisade_policy::verdict::{Decision, Verdict};
use palisade_schema::host_policy::HostPolicy;
use palisade_schema::host_policy::RequestHost;
use palisade_taint::{
    Event as TaintEvent, Rules, Session, TaintSource, TaintState, ToolClass, normalize_path,
};
use serde_json::{Value, json};

use crate::steering::observe::{
    Budget, MAX_RECORDS_PER_PATH, MAX_WATCHES, Observer, RecordBudget, Seen, Sink,
};
use crate::steering::{Change, SteeringWatch, staged_change};

/// Unix milliseconds now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for Unix milliseconds (proleptic Gregorian, UTC).
pub(crate) fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms % 1000
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The session's journal: records are appended synchronously (acknowledged
/// once durable). A failed write marks the session failed; the launcher
/// then stops the worker, because an unrecorded session must not go on.
#[derive(Debug)]
pub(crate) struct Journal {
    writer: JournalWriter,
    session: String,
    /// Shared, so that a relay's pending outward decision can check it
    /// once it is settled ([`RelayGate::outward`]).
    failed: Arc<AtomicBool>,
}

impl Journal {
    pub(crate) fn new(writer: JournalWriter, session: String) -> Self {
        Self {
            writer,
            session,
            failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Appends one record now; errors mark the journal failed. Whether it
    /// was appended (durably, as the writer is configured) while nothing
    /// had failed before.
    pub(crate) fn record(&self, kind: Kind, body: &Value, flags: Flags) -> bool {
        let res = Body::from_value(body)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                let entry = Entry::new(Timestamp(now_ms()), self.session.clone(), kind, b)
                    .with_flags(flags);
                self.writer
                    .append(&entry)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = &res
            && !self.failed.swap(true, Ordering::SeqCst)
        {
            eprintln!("palisade: journal write failed, stopping the session: {e}");
        }
        res.is_ok() && !self.failed()
    }

    /// Whether a write failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Seals and closes the journal.
    pub(crate) fn close(&self) -> Result<String, String> {
        self.writer
            .close(Timestamp(now_ms()))
            .map(|a| a.to_json())
            .map_err(|e| e.to_string())
    }
}

struct State {
    session: Session,
    /// Taint sources in report order, with their times (for the state view).
    sources: Vec<TaintEntry>,
}

/// A staged worker's stage and the filter its commit will use.
struct StagedWrites {
    stage: Arc<Stage>,
    filter: Arc<CommitFilter>,
}

/// One governed session.
pub(crate) struct SessionCore {
    id: String,
    policy: HostPolicy,
    rules: Rules,
    outward: OutwardTable,
    /// The `[[routing]]` rules: which providers may receive what was read.
    route: RouteTable,
    /// Which provider each API host belongs to (for the proxy's refusals).
    provider_hosts: ProviderHosts,
    state: Mutex<State>,
    journal: Journal,
    steering: Mutex<Option<SteeringWatch>>,
    /// Whether an observer sees every steering write as it happens (then
    /// the control requests no longer re-hash the steering paths).
    steering_observed: AtomicBool,
    /// The worker's stage and its commit filter, once a staged worker runs
    /// (for `checkpoint`; taken back for the commit once it ended).
    stage: Mutex<Option<StagedWrites>>,
    pending: AtomicUsize,
    /// Print approval prompts for the operator (`palisade approve`).
    host_endpoint: Option<String>,
    /// The session's control server, which decides the relays' outward
    /// actions ([`RelayGate::outward`]); set once it exists (it holds this
    /// core as its backend), cleared when the session ends. Until it is
    /// set, every outward action a relay asks about is denied.
    control: Mutex<Option<ControlServer>>,
}

impl std::fmt::Debug for SessionCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCore")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SessionCore {
    /// A session over `policy` (marks: the marks-file paths), recording into `journal`.
    pub(crate) fn new(
        id: String,
        policy: HostPolicy,
        marks: &[String],
        journal: Journal,
        steering: Option<SteeringWatch>,
        host_endpoint: Option<String>,
    ) -> Result<Self, String> {
        let rules = Rules::new(&policy, marks).map_err(|e| e.to_string())?;
        let outward = OutwardTable::new(&policy).map_err(|e| e.to_string())?;
        let route = RouteTable::new(&policy).map_err(|e| e.to_string())?;
        let provider_hosts = ProviderHosts::new(&policy);
        Ok(Self {
            id,
            policy,
            rules,
            outward,
            route,
            provider_hosts,
            state: Mutex::new(State {
                session: Session::new(),
                sources: Vec::new(),
            }),
            journal,
            steering: Mutex::new(steering),
            steering_observed: AtomicBool::new(false),
            stage: Mutex::new(None),
            pending: AtomicUsize::new(0),
            host_endpoint,
            control: Mutex::new(None),
        })
    }

    /// The control server that decides the relays' outward actions, from
    /// now on (the server holds this core as its backend, so it can only be
    /// handed over once both exist).
    pub(crate) fn set_control(&self, control: ControlServer) {
        *lock(&self.control) = Some(control);
    }

    /// Forgets the control server (the session ends; this also breaks the
    /// reference cycle between the server and its backend). Relays then
    /// deny every outward action again.
    pub(crate) fn clear_control(&self) {
        *lock(&self.control) = None;
    }

    /// The control server, when it is set (cloned: never held under the
    /// lock while an approval is awaited).
    fn control(&self) -> Option<ControlServer> {
        lock(&self.control).clone()
    }

    /// The journal.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Whether the session is tainted now.
    pub(crate) fn is_tainted(&self) -> bool {
        lock(&self.state).session.is_tainted()
    }

    /// Applies a taint event, records `taint_raised` for a new source, returns whether it tainted.
    ///
    /// `claimed` is the source kind the worker reported, when it reported one;
    /// the record keeps both it and the class the taint rules assigned.
    fn apply_taint(&self, event: &TaintEvent, reported_by: &str, claimed: Option<&str>) -> bool {
        let (tainted, raised) = {
            let mut st = lock(&self.state);
            self.apply_locked(&mut st, now_ms(), event, reported_by, claimed)
        };
        if let Some(body) = raised {
            self.journal
                .record(Kind::TaintRaised, &body, Flags::TAINTED);
        }
        tainted
    }

    /// Applies a taint event to the locked state; returns whether it tainted
    /// and, for a source not known yet (taint is a set), the `taint_raised`
    /// body the caller records once the lock is released.
    fn apply_locked(
        &self,
        st: &mut State,
        at: u64,
        event: &TaintEvent,
        reported_by: &str,
        claimed: Option<&str>,
    ) -> (bool, Option<Value>) {
        let before = sources_of(st.session.taint());
        let fx = st.session.apply(&self.rules, at, event);
        let Some(src) = fx.tainted_by else {
            return (false, None);
        };
        let after = sources_of(st.session.taint());
        if after.len() <= before.len() {
            return (true, None);
        }
        let detail = after
            .iter()
            .find(|s| !before.contains(*s))
            .map(|s| s.1.clone())
            .unwrap_or_default();
        let shown = claimed.unwrap_or(src.as_str());
        st.sources.push(TaintEntry {
            source: shown.to_owned(),
            detail: detail.clone(),
            at: rfc3339(at),
        });
        let body = json!({
            "source": shown,
            "class": src.as_str(),
            "detail": detail,
            "first": fx.newly_tainted,
            "by": reported_by,
            "reported_by": reported_by,
        });
        (true, Some(body))
    }

    /// The proxy's decision on the current state, reserving nothing: a
    /// routing refusal of the host's provider first (deny beats allow),
    /// then the egress rules.
    fn egress_verdict(&self, session: &Session, host: &RequestHost, port: u16) -> Verdict {
        self.provider_refusal(session, host)
            .unwrap_or_else(|| decide_host(&self.policy, session, host, port))
    }

    /// A denial when `host` is an API host of a provider the session's
    /// routing state keeps content from (`routing_denied`, naming the
    /// provider, the rule and the path).
    fn provider_refusal(&self, session: &Session, host: &RequestHost) -> Option<Verdict> {
        self.route.decide_host(&self.provider_hosts, session, host)
    }

    /// Why the session's routing state keeps content from `provider`, if it
    /// does: the first restricted path read whose rules do not list it.
    fn route_refusal(&self, session: &Session, provider: &str) -> Option<RouteRefusal> {
        let r = self.route.refusal(session, provider)?;
        Some(RouteRefusal::new(
            r.rule(),
            self.shown_path(&r.path),
            r.verdict().detail,
        ))
    }

    /// `path` as records show it: relative to the working directory when it
    /// lies below it (as taint details are), absolute otherwise.
    fn shown_path(&self, path: &str) -> String {
        normalize_path(path, self.policy.worker.cwd.as_deref())
            .pop()
            .unwrap_or_default()
    }

    /// One open of a watched path the read observer saw, at its host path
    /// (the worker sees binds and staged roots at their host paths).
    ///
    /// The read is applied to the taint and routing state under the state
    /// lock; a new taint source is recorded as `taint_raised` and the first
    /// read of a routing-restricted path as `routing_read`, both `by:
    /// "observer"`, and only once those records are durable is the open
    /// allowed. A record the journal refuses answers `Deny` (the failed
    /// journal then stops the session). A host process's open changes
    /// nothing; an open that matches no rule is allowed without a record.
    /// The state lock is held only for the apply, never while anything
    /// waits on the worker, so a proxy or relay request of the same worker
    /// cannot deadlock against it.
    pub(crate) fn observed_read(&self, path: &Path, attribution: Attribution) -> Response {
        if attribution == Attribution::Host {
            return Response::Allow;
        }
        if self.journal.failed() {
            return Response::Deny;
        }
        let path = path.to_string_lossy().into_owned();
        let event = TaintEvent::Read { path: path.clone() };
        let (raised, restricted, flags) = {
            let mut st = lock(&self.state);
            let before = st.session.restricted_reads().count();
            let (_, raised) = self.apply_locked(&mut st, now_ms(), &event, "observer", None);
            let restricted = st.session.restricted_reads().count() > before;
            let flags = if st.session.is_tainted() {
                Flags::TAINTED
            } else {
                Flags::NONE
            };
            (raised, restricted, flags)
        };
        if let Some(body) = raised
            && !self
                .journal
                .record(Kind::TaintRaised, &body, Flags::TAINTED)
        {
            return Response::Deny;
        }
        if restricted {
            let rules: Vec<String> = self
                .route
                .restrictions(&path)
                .into_iter()
                .map(|i| format!("routing[{i}]"))
                .collect();
            let body = json!({
                "path": self.shown_path(&path),
                "rules": rules,
                "by": "observer",
            });
            let Ok(kind) = Kind::custom(palisade_taint::ROUTING_READ_KIND) else {
                return Response::Deny;
            };
            if !self.journal.record(kind, &body, flags) {
                return Response::Deny;
            }
        }
        Response::Allow
    }

    /// Whether the proxy would allow `host:port` now, without reserving it
    /// (tests probe with this; [`Decider::decide`] reserves).
    #[cfg(test)]
    pub(crate) fn would_allow(&self, host: &RequestHost, port: u16) -> bool {
        let st = lock(&self.state);
        self.egress_verdict(&st.session, host, port).decision == Decision::Allow
    }

    /// The worker's writes are staged in `stage`: checkpoints read it, and
    /// the commit (not the point-in-time checks, which no longer run) records
    /// every steering write, exactly.
    pub(crate) fn set_stage(&self, stage: Stage, filter: CommitFilter) {
        *lock(&self.stage) = Some(StagedWrites {
            stage: Arc::new(stage),
            filter: Arc::new(filter),
        });
        *lock(&self.steering) = None;
    }

    /// Takes the stage back for the commit (the control channel is shut
    /// down first); `None` when there is none, or when a checkpoint still
    /// reads it after 5 s.
    pub(crate) fn take_stage(&self) -> Option<(Stage, CommitFilter)> {
        let mut s = lock(&self.stage).take()?;
        // A checkpoint answered just before the channel went down may still
        // hold the stage for a moment.
        for _ in 0..100 {
            match Arc::try_unwrap(s.stage) {
                Ok(stage) => {
                    let filter = Arc::try_unwrap(s.filter).unwrap_or_else(|f| (*f).clone());
                    return Some((stage, filter));
                }
                Err(back) => {
                    s.stage = back;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
        }
        None
    }

    /// Hashes the steering paths again and records each change; changes made
    /// while the session is tainted are flagged.
    pub(crate) fn check_steering(&self, trigger: &str) {
        let (changes, incomplete) = match lock(&self.steering).as_mut() {
            Some(w) => w.check(),
            None => return,
        };
        self.record_steering(changes, trigger);
        if incomplete {
            self.steering_incomplete(trigger, None);
        }
    }

    /// Records each steering change (`trigger` says what saw it); changes
    /// made while the session is tainted are flagged.
    pub(crate) fn record_steering(&self, changes: Vec<Change>, trigger: &str) {
        if changes.is_empty() {
            return;
        }
        let tainted = self.is_tainted();
        for c in changes {
            let path = c.path.display().to_string();
            let _ = lock(&self.state).session.apply(
                &self.rules,
                now_ms(),
                &TaintEvent::Write { path: path.clone() },
            );
            let flags = if tainted {
                Flags::FLAGGED | Flags::TAINTED
            } else {
                Flags::NONE
            };
            self.journal.record(
                Kind::SteeringWrite,
                &json!({
                    "path": path,
                    "change": c.change,
                    "before": c.before,
                    "after": c.after,
                    "tainted": tainted,
                    "trigger": trigger,
                }),
                flags,
            );
        }
    }

    /// Records that the steering paths are not all seen (`scan_incomplete`,
    /// flagged), with the reason when there is one.
    fn steering_incomplete(&self, trigger: &str, reason: Option<&str>) {
        let tainted = self.is_tainted();
        let mut body = json!({"path": null, "change": "scan_incomplete", "tainted": tainted, "trigger": trigger});
        if let (Some(r), Some(o)) = (reason, body.as_object_mut()) {
            o.insert("reason".into(), json!(r));
        }
        self.journal
            .record(Kind::SteeringWrite, &body, Flags::FLAGGED);
    }

    /// Starts observing the steering paths (`globs`, built from
    /// `patterns`) as the worker writes them: in the upper layers of
    /// `stage` when its writes are staged, else in the writable `roots`.
    /// Each change is recorded with trigger `observed`; while the observer
    /// sees everything, the control requests no longer re-hash the paths.
    /// An observer that cannot start, or that loses sight of some changes,
    /// records `scan_incomplete` (flagged, with the reason) and the
    /// control-request checks run again.
    pub(crate) fn observe_steering(
        self: &Arc<Self>,
        stage: Option<&Stage>,
        roots: &[std::path::PathBuf],
        globs: &globset::GlobSet,
        patterns: &[String],
    ) -> Option<Observer> {
        self.observe_steering_within(stage, roots, globs, patterns, MAX_WATCHES)
    }

    /// [`SessionCore::observe_steering`] with at most `max_watches`
    /// directories watched.
    pub(crate) fn observe_steering_within(
        self: &Arc<Self>,
        stage: Option<&Stage>,
        roots: &[std::path::PathBuf],
        globs: &globset::GlobSet,
        patterns: &[String],
        max_watches: usize,
    ) -> Option<Observer> {
        if patterns.is_empty() {
            return None;
        }
        let core = self.clone();
        let (watched, sink): (Vec<std::path::PathBuf>, Sink) = match stage {
            Some(stage) => {
                let pairs: Vec<(std::path::PathBuf, std::path::PathBuf)> = stage
                    .roots()
                    .iter()
                    .map(|r| (r.upper().to_path_buf(), r.root().to_path_buf()))
                    .collect();
                let uppers = pairs.iter().map(|(u, _)| u.clone()).collect();
                // Once per distinct content: the last `after` recorded per path.
                let mut last: std::collections::HashMap<std::path::PathBuf, Option<String>> =
                    std::collections::HashMap::new();
                let mut budget = RecordBudget::default();
                let sink: Sink = Box::new(move |seen| match seen {
                    Seen::Path { root, rel } => {
                        let Some((upper, host)) = pairs.get(root) else {
                            return;
                        };
                        // Over its bound, not even hashed: the commit records it.
                        if budget.spent(&host.join(&rel)) {
                            return;
                        }
                        let Some(c) = staged_change(upper, host, &rel) else {
                            return;
                        };
                        if last.get(&c.path) == Some(&c.after) {
                            return;
                        }
                        last.insert(c.path.clone(), c.after.clone());
                        if core.within_budget(&mut budget, &c.path) {
                            core.record_steering(vec![c], OBSERVED);
                        }
                    }
                    Seen::Incomplete(why) => {
                        core.steering_observed.store(false, Ordering::SeqCst);
                        core.steering_incomplete(OBSERVED, Some(&why));
                    }
                });
                (uppers, sink)
            }
            None => {
                let roots_owned = roots.to_vec();
                let mut budget = RecordBudget::default();
                let sink: Sink = Box::new(move |seen| match seen {
                    Seen::Path { root, rel } => {
                        let Some(base) = roots_owned.get(root) else {
                            return;
                        };
                        let path = base.join(&rel);
                        // Over its bound, the path is left to the exit scan
                        // (its last fingerprint stays the one recorded).
                        if budget.spent(&path) {
                            return;
                        }
                        let change = match lock(&core.steering).as_mut() {
                            Some(w) => w.recheck(base, &rel),
                            None => return,
                        };
                        if let Some(c) = change
                            && core.within_budget(&mut budget, &c.path)
                        {
                            core.record_steering(vec![c], OBSERVED);
                        }
                    }
                    Seen::Incomplete(why) => {
                        core.steering_observed.store(false, Ordering::SeqCst);
                        core.steering_incomplete(OBSERVED, Some(&why));
                    }
                });
                (roots.to_vec(), sink)
            }
        };
        // Observed from the start; an `Incomplete` report turns the
        // control-request checks back on.
        self.steering_observed.store(true, Ordering::SeqCst);
        match Observer::start_within(watched, globs.clone(), patterns, sink, max_watches) {
            Ok(o) => Some(o),
            Err(e) => {
                self.steering_observed.store(false, Ordering::SeqCst);
                self.steering_incomplete(OBSERVED, Some(&e));
                None
            }
        }
    }
}

impl SessionCore {
    /// Whether one more observed record of `path` is within its bound;
    /// the first one over it is said, once.
    fn within_budget(&self, budget: &mut RecordBudget, path: &std::path::Path) -> bool {
        match budget.take(path) {
            Budget::Record => true,
            Budget::Last => {
                self.steering_incomplete(
                    OBSERVED,
                    Some(&format!(
                        "{} was recorded {MAX_RECORDS_PER_PATH} times as observed; its later changes are recorded at the end",
                        path.display()
                    )),
                );
                true
            }
            Budget::Silent => false,
        }
    }
}

/// The `trigger` of a steering write seen as it happened.
const OBSERVED: &str = "observed";

fn sources_of(t: &TaintState) -> Vec<(TaintSource, String)> {
    match t {
        TaintState::Clean => Vec::new(),
        TaintState::Tainted { sources, .. } => sources
            .iter()
            .map(|s| (s.source, s.detail.clone()))
            .collect(),
    }
}

impl Decider for SessionCore {
    /// Decides and, when allowed, reserves in one step under the state
    /// lock: the host is marked contacted (and taints the session when the
    /// policy lists `proxy_non_relay`) before the proxy dials, so requests
    /// sent together are each decided on the state the earlier ones left.
    fn decide(&self, host: &RequestHost, port: u16, at_ms: u64) -> Verdict {
        let (v, raised) = {
            let mut st = lock(&self.state);
            let v = self.egress_verdict(&st.session, host, port);
            let raised = if v.decision == Decision::Allow {
                let event = TaintEvent::Connect {
                    host: host.to_string(),
                    port,
                    relay: false,
                };
                self.apply_locked(&mut st, at_ms, &event, "proxy", None).1
            } else {
                None
            };
            (v, raised)
        };
        if let Some(body) = raised {
            self.journal
                .record(Kind::TaintRaised, &body, Flags::TAINTED);
        }
        v
    }
}

impl RelayGate for SessionCore {
    /// Decided on the same state and under the same lock as the proxy's
    /// decisions and the observer's reads.
    fn admit(&self, _relay: &str, provider: &str) -> Result<(), RouteRefusal> {
        let st = lock(&self.state);
        self.route_refusal(&st.session, provider)
            .map_or(Ok(()), Err)
    }

    /// Raises `web` taint (detail: the result type and the relay) and
    /// records it before the relay passes the result on.
    fn server_tool_result(&self, relay: &str, _provider: &str, result: ServerToolResult) -> bool {
        let event = TaintEvent::ToolResult {
            tool: ToolClass::Web,
            name: format!("{} via relay {relay}", result.as_str()),
        };
        let _ = self.apply_taint(&event, "relay", None);
        // The taint is in the state either way; the bytes pass only while
        // the journal holds it.
        !self.journal.failed()
    }

    /// The control server's policy answer, no record, no ask; deny while
    /// there is no control server.
    fn outward_policy(&self, relay: &str, action: &OutwardAction) -> AskAnswer {
        let action = via_relay(relay, action.clone());
        self.control()
            .map_or(AskAnswer::Deny, |c| c.outward_policy(&action).verdict)
    }

    /// Decided by the control server exactly as a worker's `outward`
    /// request (asks wait for `palisade approve`), recorded with the relay
    /// and the action's facts. Without a control server: denied, and
    /// recorded as such.
    ///
    /// An allow the journal could not record (its `decided` record, or any
    /// record before it, failed) is turned into a deny: an irreversible
    /// action is never carried out unrecorded.
    fn outward(&self, relay: &str, action: OutwardAction) -> OutwardFuture {
        let action = via_relay(relay, action);
        let Some(control) = self.control() else {
            let answer = self.no_control(&action);
            return Box::pin(std::future::ready(answer));
        };
        let failed = Arc::clone(&self.journal.failed);
        Box::pin(async move {
            let mut answer = control.request_outward(&action).await;
            if answer.decision == AskAnswer::Allow && failed.load(Ordering::SeqCst) {
                answer.decision = AskAnswer::Deny;
                answer.reason = format!(
                    "the journal cannot record it, so `{}` on `{}` is refused",
                    action.kind, action.target
                );
            }
            answer
        })
    }

    /// Refused without asking, recorded as decided, deny.
    fn outward_refused(&self, relay: &str, action: OutwardAction, reason: &str) -> OutwardAnswer {
        let action = via_relay(relay, action);
        match self.control() {
            Some(c) => c.refuse_outward(&action, reason),
            None => self.no_control(&action),
        }
    }

    /// Recorded once per allowed ticket (the control server refuses a
    /// second report, and a ticket it did not allow).
    fn outward_executed(
        &self,
        relay: &str,
        ticket: u64,
        action: &OutwardAction,
        result: &OutwardResult,
    ) {
        let action = via_relay(relay, action.clone());
        let recorded = self
            .control()
            .is_some_and(|c| c.relay_executed(ticket, &action, result));
        if !recorded {
            eprintln!(
                "palisade: relay `{relay}` reported ticket {ticket} executed, but that ticket was not allowed to it or was reported already; not recorded again"
            );
        }
    }
}

/// `action` as carried out by `relay`: the gate's caller names the relay,
/// so the record's `via` is that name whatever the action said.
fn via_relay(relay: &str, mut action: OutwardAction) -> OutwardAction {
    action.via = Some(relay.to_owned());
    action
}

/// The keys an `outward_action` record sets itself: an action's or a
/// result's facts never replace them.
const OUTWARD_RECORD_KEYS: &[&str] = &[
    "event", "ticket", "kind", "target", "via", "policy", "decision", "approval", "rule", "reason",
    "tainted", "status",
];

/// Adds `via` (when there is one) and the facts of `details` to an
/// `outward_action` body, never over a key the record sets itself.
fn with_facts(
    mut body: Value,
    via: Option<&str>,
    details: &[&std::collections::BTreeMap<String, String>],
) -> Value {
    if let Some(o) = body.as_object_mut() {
        if let Some(v) = via {
            o.insert("via".into(), json!(v));
        }
        for (k, v) in details.iter().flat_map(|d| d.iter()) {
            if !OUTWARD_RECORD_KEYS.contains(&k.as_str()) {
                o.entry(k.clone()).or_insert_with(|| json!(v));
            }
        }
    }
    body
}

impl SessionCore {
    /// Appends a proxy or relay record now; whether it was accepted.
    fn append_event(&self, event: &ProxyEvent) -> bool {
        let kind = palisade_egress::journal::evidence_kind(event);
        let flags = if self.is_tainted() {
            Flags::TAINTED
        } else {
            Flags::NONE
        };
        self.journal.record(kind, &event.to_json(), flags)
    }
}

impl SessionCore {
    /// The answer for a relay's outward action while there is no control
    /// server: denied, and recorded as decided (ticket 0 is never issued).
    fn no_control(&self, action: &OutwardAction) -> OutwardAnswer {
        let answer = OutwardAnswer {
            ticket: 0,
            decision: AskAnswer::Deny,
            policy: AskAnswer::Deny,
            approval: None,
            rule: None,
            reason: format!(
                "the session's control channel is not running, so `{}` on `{}` is refused",
                action.kind, action.target
            ),
        };
        self.relay_outward_settled(action, &answer);
        answer
    }

    /// Records `outward_action` decided: the worker's requests (`via`
    /// `None`, no facts) and the relays' alike.
    fn record_outward_decided(
        &self,
        kind: &str,
        target: &str,
        via: Option<&str>,
        details: &[&std::collections::BTreeMap<String, String>],
        a: &OutwardAnswer,
    ) {
        if a.approval.is_some() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
        let tainted = self.is_tainted();
        let body = json!({
            "event": "decided",
            "ticket": a.ticket,
            "kind": kind,
            "target": target,
            "policy": a.policy.as_str(),
            "decision": a.decision.as_str(),
            "approval": a.approval.map(|x| match x {
                palisade_egress::control::Approval::Approved => "approved",
                palisade_egress::control::Approval::Denied => "denied",
                palisade_egress::control::Approval::TimedOut => "timed_out",
                palisade_egress::control::Approval::Cancelled => "cancelled",
            }),
            "rule": a.rule,
            "reason": a.reason,
            "tainted": tainted,
        });
        self.journal.record(
            Kind::OutwardAction,
            &with_facts(body, via, details),
            if tainted { Flags::TAINTED } else { Flags::NONE },
        );
    }

    /// Records `outward_action` executed (`irreversible`) after applying
    /// the outward taint event: the worker's reports and the relays' alike.
    fn record_outward_executed(
        &self,
        ticket: u64,
        kind: &str,
        target: &str,
        via: Option<&str>,
        details: &[&std::collections::BTreeMap<String, String>],
        status: Option<i32>,
    ) {
        let fx = lock(&self.state).session.apply(
            &self.rules,
            now_ms(),
            &TaintEvent::Outward {
                kind: kind.to_owned(),
                target: target.to_owned(),
            },
        );
        // Executed means done: even a failed command may have had an effect,
        // so an executed action is irreversible whatever its status.
        let _ = fx;
        let flags = if self.is_tainted() {
            Flags::TAINTED | Flags::IRREVERSIBLE
        } else {
            Flags::IRREVERSIBLE
        };
        let body = json!({
            "event": "executed",
            "ticket": ticket,
            "kind": kind,
            "target": target,
            "decision": "allow",
            "policy": null,
            "status": status,
        });
        self.journal
            .record(Kind::OutwardAction, &with_facts(body, via, details), flags);
    }
}

impl Recorder for SessionCore {
    fn record(&self, event: &ProxyEvent) {
        let _ = self.append_event(event);
    }

    /// The journal appends synchronously, so the answer is final: the
    /// proxy lets a connection through only once its admission is on disk.
    fn record_accepted(&self, event: &ProxyEvent) -> Acceptance {
        if self.journal.failed() {
            return Acceptance::ready(false);
        }
        Acceptance::ready(self.append_event(event))
    }

    fn healthy(&self) -> bool {
        !self.journal.failed()
    }
}

impl ControlBackend for SessionCore {
    fn before_request(&self, endpoint: Endpoint, op: &str) {
        // The worker's requests mark points in its run; the host's polling
        // (`palisade approve --next`) must not cost a walk each time.
        // An observer that sees every steering write makes them unneeded.
        if endpoint == Endpoint::Worker && !self.steering_observed.load(Ordering::SeqCst) {
            self.check_steering(&format!("control:{op}"));
        }
    }

    fn taint(&self, source: TaintKind, detail: &str) -> SessionView {
        let specific = match source {
            TaintKind::Web => Some(TaintEvent::ToolResult {
                tool: ToolClass::Web,
                name: detail.to_owned(),
            }),
            TaintKind::Mcp => Some(TaintEvent::ToolResult {
                tool: ToolClass::ExternalMcp,
                name: detail.to_owned(),
            }),
            TaintKind::MarkedFile => Some(TaintEvent::Read {
                path: detail.to_owned(),
            }),
            TaintKind::Inbox => None,
        };
        let claimed = Some(source.as_str());
        let tainted = specific.is_some_and(|e| self.apply_taint(&e, "worker", claimed));
        if !tainted {
            // A worker's own report always taints, even when the policy does
            // not list that source or path: taint errs on the side of caution.
            let label = format!("{}:{detail}", source.as_str());
            let _ = self.apply_taint(&TaintEvent::UntrustedInput { label }, "worker", claimed);
        }
        self.state()
    }

    fn decide_outward(&self, kind: &str, target: &str) -> PolicyAnswer {
        let v = {
            let st = lock(&self.state);
            self.outward
                .decide(&st.session, &OutwardRequest { kind, target })
        };
        PolicyAnswer::new(
            match v.decision {
                Decision::Allow => AskAnswer::Allow,
                Decision::Ask => AskAnswer::Ask,
                Decision::Deny => AskAnswer::Deny,
            },
            v.rule,
            v.detail,
        )
    }

    fn outward_pending(&self, p: &PendingAction) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        let how = self
            .host_endpoint
            .as_ref()
            .map(|e| format!(": palisade approve --socket {e} {} [--deny]", p.ticket))
            .unwrap_or_default();
        let via = p
            .via
            .as_ref()
            .map(|v| format!(" through relay `{v}`"))
            .unwrap_or_default();
        eprintln!(
            "palisade: outward `{}` to `{}`{via} waits for approval (ticket {}){how}",
            p.kind, p.target, p.ticket
        );
    }

    fn outward_settled(&self, kind: &str, target: &str, a: &OutwardAnswer) {
        self.record_outward_decided(kind, target, None, &[], a);
    }

    fn outward_executed(&self, ticket: u64, kind: &str, target: &str, status: Option<i32>) {
        self.record_outward_executed(ticket, kind, target, None, &[], status);
    }

    /// Recorded as the worker's requests are, with the relay (`via`) and
    /// the action's facts (`ref`, `old`, `new`, `method`, `path`).
    fn relay_outward_settled(&self, action: &OutwardAction, answer: &OutwardAnswer) {
        self.record_outward_decided(
            &action.kind,
            &action.target,
            action.via.as_deref(),
            &[&action.detail],
            answer,
        );
    }

    /// Recorded as the worker's reports are (`irreversible`, the outward
    /// taint event), with the relay, the action's facts and the result's
    /// (`result`).
    fn relay_outward_executed(&self, ticket: u64, action: &OutwardAction, result: &OutwardResult) {
        self.record_outward_executed(
            ticket,
            &action.kind,
            &action.target,
            action.via.as_deref(),
            &[&action.detail, &result.detail],
            result.status,
        );
    }

    fn state(&self) -> SessionView {
        let st = lock(&self.state);
        let mut contacted: Vec<String> = st.session.contacted().map(str::to_owned).collect();
        contacted.sort();
        SessionView {
            session: self.id.clone(),
            tainted: st.session.is_tainted(),
            tainted_at: st.session.first_tainted_at_ms().map(rfc3339),
            sources: st.sources.clone(),
            contacted,
            pending: self.pending.load(Ordering::SeqCst),
        }
    }

    /// The stage's change set now, read only, recorded as `stage_checkpoint`.
    fn checkpoint(&self) -> Result<CheckpointSummary, String> {
        // The lock is not held while the upper layers are read.
        let (stage, filter) = match lock(&self.stage).as_ref() {
            Some(s) => (s.stage.clone(), s.filter.clone()),
            None => {
                return Err(String::from(
                    "this session's writes are not staged (direct writes, or no writable root)",
                ));
            }
        };
        crate::stage::checkpoint_record(&self.journal, &stage, &filter, "ctl")
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_000_000_500), "2026-11-30T00:53:20.500Z");
    }
}
