//! The `kind = "git"` relay mode: git smart HTTP to the relay's one origin,
//! with every ref update of a push decided as an outward action.
//!
//! The routes are implicit: `GET /OWNER/REPO(.git)/info/refs?service=…`
//! and `POST /OWNER/REPO(.git)/git-upload-pack` are reads, forwarded with
//! their responses streamed back (a clone never sits in memory; an
//! upload-pack negotiation body is read under the relay's body limits);
//! `POST /OWNER/REPO(.git)/git-receive-pack` is a push. `repos` limits the
//! `OWNER/REPO` served (403 `repo_not_allowed`).
//!
//! A push's head (commands, capabilities, push options) is read first,
//! bounded by [`crate::git::pktline::MAX_HEAD_BYTES`]; a request under a
//! content coding is refused (415). Each ref update is an outward action on
//! `<host[:port]>/<OWNER/REPO>:<ref>`: `git.delete_ref` (new id zero),
//! `git.push` (a create, or an update the pack proves a fast-forward) or
//! `git.force_push` (an update the pack does not prove a fast-forward: the
//! relay hashes the pack's commits itself, so a client cannot claim one).
//! Before anything goes upstream every update is checked with
//! [`RelayGate::outward_policy`] (an update for both `git.push` and
//! `git.force_push`); one denied in every case refuses the whole push at
//! once. Otherwise the pack streams to the origin as it arrives while a
//! [`PackScanner`] reads it, the pack's trailer and the end of the body
//! held back; once the pack is complete each update is decided with
//! [`RelayGate::outward`] (an ask waits for the host). All allowed: the
//! trailer goes out and the origin's report is passed back unchanged while
//! a [`ReportReader`] reads it, and each ref is reported with
//! [`RelayGate::outward_executed`]. One refused: the upstream connection is
//! dropped before the trailer (the origin sees a truncated pack and changes
//! nothing) and the worker gets a `report-status` that rejects every ref.
//! A push that carries no pack (deletions only) is decided before a byte
//! of it goes upstream. A relay without a gate decides no outward action:
//! every push is refused, reads are forwarded.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Frame;
use palisade_schema::host_policy::TargetGlob;
use tokio::sync::mpsc;

use super::{
    BODY_READ_FAILED, BODY_TIMEOUT, BoxError, BufferPermit, Inner, NO_TIMEOUT, OVERRIDE_REFUSED,
    RECORDING_UNAVAILABLE, RELAY_BUSY, ROUTING_DENIED, Refusal, Relay, RelayBody, RelayGate,
    RouteRefusal, ServerToolResult, forwarded_request, has_override,
};
use crate::control::{AskAnswer, OutwardAction, OutwardAnswer, OutwardResult};
use crate::git::pack::{Ancestry, PackScanner};
use crate::git::pktline::{self, PushHead, RefUpdate};
use crate::git::report::{RefStatus, ReportReader, refusal_body};
use crate::record::{RelayOutcome, RelayRecord};

/// The outward kind of a ref update the pack proves a fast-forward, or a
/// create.
pub const GIT_PUSH: &str = "git.push";
/// The outward kind of a ref update the pack does not prove a fast-forward.
pub const GIT_FORCE_PUSH: &str = "git.force_push";
/// The outward kind of a ref deletion.
pub const GIT_DELETE_REF: &str = "git.delete_ref";
/// The outward kind of a push's push options (`git push -o …`), on
/// `<host[:port]>/<OWNER/REPO>`: origins act on them (GitLab opens and
/// merges merge requests from `merge_request.*`).
pub const GIT_PUSH_OPTIONS: &str = "git.push_options";

/// Most characters of one push option shown in a decided action's detail;
/// a longer one is cut and marked with `…`.
const MAX_SHOWN_OPTION: usize = 200;

/// Why a ref of a refused push that was not itself refused is rejected.
pub const ANOTHER_REF_REFUSED: &str = "another ref in this push was refused";

/// Most bytes a push without a pack (deletions only) may carry after its
/// head (64 KiB); more is a malformed push.
const MAX_PACKLESS_TAIL: usize = 64 * 1024;

/// Longest a push's pack may take to arrive, from the request's start (1
/// hour; its idle timeout still applies between chunks): a pack trickled
/// a byte at a time cannot hold the commits the relay keeps, and its
/// share of the buffer budget, for ever. Then 408 `body_timeout`.
pub const MAX_PACK_TIME: Duration = Duration::from_secs(3600);

/// A `kind = "git"` relay's settings ([`super::RelayConfig::new_git`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GitSettings {
    /// The `OWNER/REPO` globs served (`repos`); empty serves every
    /// repository the credential reaches.
    pub repos: Vec<TargetGlob>,
}

impl GitSettings {
    /// Settings serving `repos` (empty: all).
    pub fn new(repos: Vec<TargetGlob>) -> Self {
        Self { repos }
    }

    /// Whether `repo` (`OWNER/REPO`, no `.git`) is served. A glob that does
    /// not compile serves nothing (never everything).
    pub fn serves(&self, repo: &str) -> bool {
        self.repos.is_empty()
            || self.repos.iter().any(|g| {
                g.compile(false)
                    .is_ok_and(|g| g.compile_matcher().is_match(&*TargetGlob::comparable(repo)))
            })
    }
}

const NOT_GIT: Refusal = (
    StatusCode::FORBIDDEN,
    "route_not_allowed",
    "This path is not a git smart HTTP route (/OWNER/REPO/info/refs, git-upload-pack, git-receive-pack)",
);
const GIT_METHOD: Refusal = (
    StatusCode::METHOD_NOT_ALLOWED,
    "method_not_allowed",
    "This method is not relayed for this path",
);
const REPO_NOT_ALLOWED: Refusal = (
    StatusCode::FORBIDDEN,
    "repo_not_allowed",
    "This repository is not served by this relay",
);
const ENCODED_REQUEST: Refusal = (
    StatusCode::UNSUPPORTED_MEDIA_TYPE,
    "encoded_request",
    "A push under a content coding is not relayed (send it as identity)",
);
const MALFORMED_PUSH: Refusal = (
    StatusCode::BAD_REQUEST,
    "malformed_push",
    "The push could not be read; nothing of it was applied",
);
const PLACEHOLDER_REQUIRED: Refusal = (
    StatusCode::UNAUTHORIZED,
    "placeholder_required",
    "The relay placeholder credential is missing or wrong",
);

/// Which git service a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    /// `GET …/info/refs?service=…`.
    InfoRefs,
    /// `POST …/git-upload-pack`.
    UploadPack,
    /// `POST …/git-receive-pack`.
    ReceivePack,
}

/// A git smart HTTP request path: `OWNER/REPO` (without `.git`) and service.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GitPath {
    repo: String,
    service: Service,
}

/// Parses `/OWNER/REPO(.git)/<service>` (the query checked for
/// `info/refs`); anything else is refused.
fn parse_path(method: &Method, path: &str, query: Option<&str>) -> Result<GitPath, Refusal> {
    let segs: Vec<&str> = path.split('/').collect();
    let (owner, repo, rest) = match segs.as_slice() {
        ["", owner, repo, rest @ ..] => (*owner, *repo, rest),
        _ => return Err(NOT_GIT),
    };
    // `.git` in any case: git and the origins accept `app.GIT` for `app`,
    // so the target and the `repos` match must not see a distinct repo
    let repo = strip_git_suffix(repo);
    let plain = palisade_policy::relay_route::is_plain_segment;
    if !plain(owner) || !plain(repo) {
        return Err(NOT_GIT);
    }
    let (service, want) = match rest {
        ["info", "refs"] => (Service::InfoRefs, Method::GET),
        ["git-upload-pack"] => (Service::UploadPack, Method::POST),
        ["git-receive-pack"] => (Service::ReceivePack, Method::POST),
        _ => return Err(NOT_GIT),
    };
    match (service, query) {
        (Service::InfoRefs, Some("service=git-upload-pack" | "service=git-receive-pack")) => {}
        // the dumb protocol and odd queries are not relayed
        (Service::InfoRefs, _) | (_, Some(_)) => return Err(NOT_GIT),
        (_, None) => {}
    }
    if *method != want {
        return Err(GIT_METHOD);
    }
    Ok(GitPath {
        repo: format!("{owner}/{repo}"),
        service,
    })
}

/// `repo` without a trailing `.git`, matched case-insensitively.
fn strip_git_suffix(repo: &str) -> &str {
    let n = repo.len();
    match (n.checked_sub(4), repo.get(n.saturating_sub(4)..)) {
        (Some(cut), Some(tail)) if tail.eq_ignore_ascii_case(".git") => {
            repo.get(..cut).unwrap_or(repo)
        }
        _ => repo,
    }
}

/// The gate of a relay that has none: reads pass, every outward action is
/// refused (the trait's defaults).
#[derive(Debug)]
struct Ungated;

impl RelayGate for Ungated {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }

    fn server_tool_result(&self, _: &str, _: &str, _: ServerToolResult) -> bool {
        true
    }
}

/// What the next read of a request body gave.
enum Next {
    Data(Bytes),
    End,
    Timeout,
    Failed,
}

/// A request body read frame by frame under the relay's idle timeout and,
/// while `deadline` is set, an overall deadline.
struct BodyReader<B> {
    body: Pin<Box<B>>,
    idle: Duration,
    deadline: Option<tokio::time::Instant>,
    ended: bool,
}

fn after(from: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    from + d.min(NO_TIMEOUT)
}

impl<B> BodyReader<B>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    async fn next(&mut self) -> Next {
        if self.ended {
            return Next::End;
        }
        loop {
            let mut wait = after(tokio::time::Instant::now(), self.idle);
            if let Some(d) = self.deadline {
                wait = wait.min(d);
            }
            let frame = match tokio::time::timeout_at(wait, self.body.as_mut().frame()).await {
                Err(_) => return Next::Timeout,
                Ok(None) => {
                    self.ended = true;
                    return Next::End;
                }
                Ok(Some(Err(_))) => return Next::Failed,
                Ok(Some(Ok(frame))) => frame,
            };
            // request trailers are not forwarded
            if let Ok(data) = frame.into_data()
                && !data.is_empty()
            {
                return Next::Data(data);
            }
        }
    }

    /// Reads and discards the rest of the body, within `budget` from now,
    /// so the client reads the answer rather than a broken pipe.
    async fn drain(&mut self, budget: Duration) {
        self.deadline = Some(after(tokio::time::Instant::now(), budget));
        while let Next::Data(_) = self.next().await {}
    }
}

/// A request body fed by a channel (a push streaming to the origin); the
/// bytes each chunk took of the relay's budget are returned once hyper has
/// taken it, or when the body is dropped. It ends cleanly only once its
/// sender said so ([`Upstream::finish`]): a sender dropped or cut without
/// it (a refusal, the worker gone, the relay stopping) is an error, so the
/// origin never sees the body's end.
struct StreamBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
    inner: Arc<Inner>,
    finished: Arc<AtomicBool>,
    /// Bytes hyper took from this body (to write to the origin).
    taken: Arc<AtomicU64>,
}

fn take_budget(inner: &Inner, n: usize) -> bool {
    let max = inner.config.max_buffered;
    match inner
        .buffered
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
            cur.checked_add(n).filter(|t| *t <= max)
        }) {
        Ok(prev) => {
            inner
                .peak_buffered
                .fetch_max(prev.saturating_add(n), Ordering::AcqRel);
            true
        }
        Err(_) => false,
    }
}

fn give_budget(inner: &Inner, n: usize) {
    inner.buffered.fetch_sub(n, Ordering::AcqRel);
}

impl hyper::body::Body for StreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(data))) => {
                give_budget(&self.inner, data.len());
                self.taken.fetch_add(data.len() as u64, Ordering::AcqRel);
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) if self.finished.load(Ordering::Acquire) => Poll::Ready(None),
            Poll::Ready(None) => Poll::Ready(Some(Err("push cut by palisade".into()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(item) = self.rx.try_recv() {
            if let Ok(data) = item {
                give_budget(&self.inner, data.len());
            }
        }
    }
}

/// The sending half of a [`StreamBody`].
struct Upstream {
    tx: Option<mpsc::Sender<Result<Bytes, BoxError>>>,
    finished: Arc<AtomicBool>,
    inner: Arc<Inner>,
    sent: u64,
    /// The origin stopped reading (it answered early, or went away).
    gone: bool,
}

impl Upstream {
    /// Sends `data` on; `Err` when the relay's budget is spent.
    async fn send(&mut self, data: Bytes) -> Result<(), Refusal> {
        if data.is_empty() || self.gone {
            return Ok(());
        }
        let Some(tx) = &self.tx else { return Ok(()) };
        let n = data.len();
        if !take_budget(&self.inner, n) {
            return Err(RELAY_BUSY);
        }
        if tx.send(Ok(data)).await.is_err() {
            give_budget(&self.inner, n);
            self.gone = true;
        } else {
            self.sent = self.sent.saturating_add(n as u64);
        }
        Ok(())
    }

    /// Ends the body cleanly: the origin may act on what it received.
    fn finish(&mut self) {
        self.finished.store(true, Ordering::Release);
        self.tx = None;
    }

    /// Cuts the body: the origin sees an error, never its end (the body
    /// errs on a sender gone without [`Upstream::finish`]).
    fn cut(&mut self) {
        self.tx = None;
    }
}

/// Holds back the last `keep` bytes of a stream (a pack's trailer).
struct HoldBack {
    keep: usize,
    held: BytesMut,
}

impl HoldBack {
    /// What of `held + data` may go out now, keeping the last `keep` bytes.
    fn push(&mut self, data: Bytes) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(2);
        if data.len() >= self.keep {
            if !self.held.is_empty() {
                out.push(std::mem::take(&mut self.held).freeze());
            }
            let cut = data.len() - self.keep;
            out.push(data.slice(..cut));
            self.held
                .extend_from_slice(data.get(cut..).unwrap_or_default());
        } else {
            self.held.extend_from_slice(&data);
            if self.held.len() > self.keep {
                let cut = self.held.len() - self.keep;
                out.push(self.held.split_to(cut).freeze());
            }
        }
        out
    }

    fn release(&mut self) -> Bytes {
        std::mem::take(&mut self.held).freeze()
    }
}

/// The origin's answer to a push, read by a [`ReportReader`] as it passes
/// through unchanged; each allowed ref is reported executed (its `ok`/`ng`,
/// or `unknown` when the answer did not say) once, at its end or when it is
/// dropped.
struct ReportBody {
    inner: RelayBody,
    reader: ReportReader,
    readable: bool,
    gate: Arc<dyn RelayGate>,
    relay: String,
    status: u16,
    allowed: Vec<(u64, OutwardAction)>,
    reported: bool,
    /// For a streamed pack: the bytes the origin's connection took and
    /// the bytes of the whole body (head, pack, trailer). Fewer taken when
    /// the answer ends: the trailer never reached the origin, whose pack
    /// is truncated, so nothing was applied and nothing is executed.
    trailer: Option<(Arc<AtomicU64>, u64)>,
}

impl ReportBody {
    /// `ended`: the origin's answer ended (or failed), rather than the
    /// worker dropping it; only then can a trailer not yet taken prove the
    /// push was not applied (dropped early, the connection may still send
    /// it, so the refs are reported as the answer said, else `unknown`).
    fn report(&mut self, ended: bool) {
        if self.reported {
            return;
        }
        self.reported = true;
        if ended
            && let Some((taken, sent)) = &self.trailer
            && taken.load(Ordering::Acquire) < *sent
        {
            tracing::warn!(
                target: "palisade_egress",
                relay = %self.relay,
                "the origin's connection ended before the push's trailer reached it; nothing applied, nothing recorded executed"
            );
            return;
        }
        let (_unpack, results) = self.reader.results();
        for (ticket, action) in &self.allowed {
            let result = if action.kind == GIT_PUSH_OPTIONS {
                // the options went with the push: `ok` when every ref was
                // applied (what the origin did with them it does not say)
                let refs: Vec<&RefStatus> = self
                    .allowed
                    .iter()
                    .filter_map(|(_, a)| a.detail.get("ref"))
                    .filter_map(|name| results.iter().find(|(r, _)| r == name).map(|(_, s)| s))
                    .collect();
                let all = self
                    .allowed
                    .iter()
                    .filter(|(_, a)| a.detail.contains_key("ref"))
                    .count();
                if refs.len() < all {
                    "unknown".to_owned()
                } else if refs.iter().all(|s| **s == RefStatus::Ok) {
                    "ok".to_owned()
                } else {
                    "ng".to_owned()
                }
            } else {
                let name = action.detail.get("ref").map(String::as_str).unwrap_or("");
                match results.iter().find(|(r, _)| r == name) {
                    Some((_, RefStatus::Ok)) => "ok".to_owned(),
                    Some((_, RefStatus::Ng(why))) => format!("ng {why}"),
                    None => "unknown".to_owned(),
                }
            };
            let mut detail = BTreeMap::new();
            detail.insert("result".to_owned(), result);
            let outcome = OutwardResult {
                status: Some(i32::from(self.status)),
                detail,
            };
            self.gate
                .outward_executed(&self.relay, *ticket, action, &outcome);
        }
    }
}

impl hyper::body::Body for ReportBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && self.readable
                {
                    let data = data.clone();
                    if self.reader.feed(&data).is_err() {
                        self.readable = false;
                    }
                }
            }
            Poll::Ready(None | Some(Err(_))) => self.report(true),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for ReportBody {
    fn drop(&mut self) {
        self.report(false);
    }
}

/// A one-line, printable form of `s` for a report-status line.
fn one_line(s: &str) -> String {
    let line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    line.chars().take(400).collect()
}

/// The answer rejecting every ref of a refused push.
fn refused_push(head: &PushHead, refs: &[(String, RefStatus)]) -> Response<RelayBody> {
    let messages: Vec<String> = refs
        .iter()
        .filter_map(|(name, status)| match status {
            RefStatus::Ng(why) if !why.ends_with(ANOTHER_REF_REFUSED) => {
                Some(format!("palisade: {name}: {why}"))
            }
            _ => None,
        })
        .collect();
    let body = refusal_body(&head.capabilities, refs, &messages);
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-git-receive-pack-result"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    resp
}

fn ng(answer: &OutwardAnswer) -> RefStatus {
    let why = answer.rule.as_deref().unwrap_or(&answer.reason);
    RefStatus::Ng(format!("refused by palisade: {}", one_line(why)))
}

fn another() -> RefStatus {
    RefStatus::Ng(format!("refused by palisade: {ANOTHER_REF_REFUSED}"))
}

/// The `push_options` detail of a push: its options joined with `\n`,
/// each cut at [`MAX_SHOWN_OPTION`] characters, control characters
/// escaped (the parser already refused NUL and newline); `None` without
/// options.
fn options_detail(options: &[String]) -> Option<String> {
    if options.is_empty() {
        return None;
    }
    let shown: Vec<String> = options
        .iter()
        .map(|o| {
            let mut line = String::new();
            for (i, c) in o.chars().enumerate() {
                if i == MAX_SHOWN_OPTION {
                    line.push('…');
                    break;
                }
                if c.is_control() {
                    line.extend(c.escape_default());
                } else {
                    line.push(c);
                }
            }
            line
        })
        .collect();
    Some(shown.join("\n"))
}

/// The candidate kinds of an update before its pack is read.
fn candidates(u: &RefUpdate) -> &'static [&'static str] {
    if u.new.is_zero() {
        &[GIT_DELETE_REF]
    } else if u.old.is_zero() {
        &[GIT_PUSH]
    } else {
        &[GIT_PUSH, GIT_FORCE_PUSH]
    }
}

/// The kind of an update once its pack is read.
fn classify(u: &RefUpdate, scanner: Option<&PackScanner>) -> &'static str {
    if u.new.is_zero() {
        GIT_DELETE_REF
    } else if u.old.is_zero() {
        GIT_PUSH
    } else {
        match scanner.map(|s| s.fast_forward(&u.old, &u.new)) {
            Some(Ancestry::FastForward) => GIT_PUSH,
            _ => GIT_FORCE_PUSH,
        }
    }
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;
type Sender = hyper::client::conn::http1::SendRequest<UpBody>;

impl Relay {
    /// The git relay's handling of one request (entered from
    /// [`Relay::handle`] for a `kind = "git"` relay).
    pub(super) async fn forward_git<B>(
        &self,
        req: Request<B>,
        record: &mut RelayRecord,
        t0: Instant,
    ) -> Result<Response<RelayBody>, Refusal>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let cfg = &self.inner.config;
        let Some(git) = &cfg.git else {
            return Err(NOT_GIT);
        };
        if !self.inner.recorder.healthy() {
            return Err(RECORDING_UNAVAILABLE);
        }
        // 1. placeholder, compared in constant time (Basic: decoded)
        if !cfg.credential.presented(req.headers(), &cfg.placeholder) {
            return Err(PLACEHOLDER_REQUIRED);
        }
        // 2. origin-form, no override, an implicit git route, a served repo
        if req.uri().scheme().is_some() || req.uri().authority().is_some() {
            return Err((
                StatusCode::BAD_REQUEST,
                "origin_form_required",
                "Requests to the relay must use origin-form",
            ));
        }
        if has_override(req.headers(), req.uri()) {
            return Err(OVERRIDE_REFUSED);
        }
        let path = parse_path(req.method(), req.uri().path(), req.uri().query())?;
        if !git.serves(&path.repo) {
            return Err(REPO_NOT_ALLOWED);
        }
        let (parts, body) = req.into_parts();
        let builder = self.upstream_builder(&parts)?;
        match path.service {
            Service::InfoRefs => {
                let up = builder
                    .header(http::header::CONTENT_LENGTH, 0)
                    .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                    .map_err(|_| REBUILD_FAILED)?;
                let (mut sender, _conn) = self.open(record).await?;
                let resp = sender.send_request(up).await.map_err(|_| UNREACHABLE)?;
                self.pass_back(resp)
            }
            Service::UploadPack => {
                let declared = parts
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > cfg.max_body as u64) {
                    return Err(super::BODY_TOO_LARGE);
                }
                let body = self.read_body(body, t0).await?;
                record.bytes_up = body.len as u64;
                let up = builder
                    .header(http::header::CONTENT_LENGTH, body.len)
                    .body(body.map_err(|e| match e {}).boxed())
                    .map_err(|_| REBUILD_FAILED)?;
                let (mut sender, _conn) = self.open(record).await?;
                let resp = sender.send_request(up).await.map_err(|_| UNREACHABLE)?;
                self.pass_back(resp)
            }
            Service::ReceivePack => {
                if parts
                    .headers
                    .get_all(http::header::CONTENT_ENCODING)
                    .iter()
                    .any(|v| {
                        v.to_str().map_or(true, |v| {
                            v.split(',')
                                .map(str::trim)
                                .any(|t| !t.is_empty() && !t.eq_ignore_ascii_case("identity"))
                        })
                    })
                {
                    return Err(ENCODED_REQUEST);
                }
                self.push(builder, body, &path, record, t0).await
            }
        }
    }

    /// The upstream request's method, path and headers: the worker's
    /// headers but the stripped ones, its credential and `expect`, plus
    /// `Host`, the host credential and `accept-encoding: identity`.
    fn upstream_builder(
        &self,
        parts: &http::request::Parts,
    ) -> Result<http::request::Builder, Refusal> {
        let cfg = &self.inner.config;
        let (builder, host) = forwarded_request(cfg, parts, &[http::header::EXPECT])?;
        let cred = cfg.credential.upstream_value().ok_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "credential_invalid",
            "The relay credential is invalid",
        ))?;
        Ok(builder
            .header(http::header::HOST, host)
            .header(cfg.credential.header.clone(), cred)
            .header(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            ))
    }

    /// Routing admission, the dial through the address checks, TLS, and
    /// the accepted admission record: after this, bytes may go upstream.
    async fn open(
        &self,
        record: &mut RelayRecord,
    ) -> Result<(Sender, tokio::task::JoinHandle<()>), Refusal> {
        let cfg = &self.inner.config;
        if let Some(gate) = &self.inner.gate
            && let Err(refusal) = gate.admit(&cfg.name, &cfg.provider)
        {
            record.outcome = RelayOutcome::RoutingDenied;
            record.routing = Some(refusal);
            record.bytes_up = 0;
            return Err(ROUTING_DENIED);
        }
        self.dial_admitted(record).await
    }

    /// A read's response, streamed back as the origin sends it.
    fn pass_back(
        &self,
        resp: Response<hyper::body::Incoming>,
    ) -> Result<Response<RelayBody>, Refusal> {
        let (parts, body) = self.clean_response(resp)?;
        Ok(Response::from_parts(parts, body))
    }

    /// `POST …/git-receive-pack`.
    async fn push<B>(
        &self,
        builder: http::request::Builder,
        body: B,
        path: &GitPath,
        record: &mut RelayRecord,
        t0: Instant,
    ) -> Result<Response<RelayBody>, Refusal>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let cfg = &self.inner.config;
        let gate: Arc<dyn RelayGate> = match &self.inner.gate {
            Some(g) => Arc::clone(g),
            None => Arc::new(Ungated),
        };
        let relay = cfg.name.as_str();
        let mut reader = BodyReader {
            body: Box::pin(body),
            idle: cfg.body_idle_timeout,
            deadline: Some(after(tokio::time::Instant::from_std(t0), cfg.body_timeout)),
            ended: false,
        };
        let drain_budget = cfg.body_timeout;

        // 1. the head, bounded
        let mut permit = BufferPermit {
            inner: self.inner.clone(),
            held: 0,
        };
        let mut buf = BytesMut::new();
        let head = loop {
            match pktline::parse_push_head(&buf) {
                Ok(Some(head)) => break head,
                Ok(None) if buf.len() <= pktline::MAX_HEAD_BYTES => {}
                Ok(None) | Err(_) => {
                    drop(permit);
                    reader.drain(drain_budget).await;
                    return Err(MALFORMED_PUSH);
                }
            }
            match reader.next().await {
                Next::Data(d) => {
                    if !permit.grow(d.len()) {
                        return Err(RELAY_BUSY);
                    }
                    buf.extend_from_slice(&d);
                }
                Next::End => return Err(MALFORMED_PUSH),
                Next::Timeout => return Err(BODY_TIMEOUT),
                Next::Failed => return Err(BODY_READ_FAILED),
            }
        };
        if head.consumed > buf.len() {
            return Err(MALFORMED_PUSH);
        }
        let head_bytes = buf.split_to(head.consumed).freeze();
        let rest = buf.freeze();
        let target = |u: &RefUpdate| format!("{}/{}:{}", cfg.authority(), path.repo, u.name);
        let options = options_detail(&head.push_options);
        let action = |kind: &str, u: &RefUpdate| {
            let a = OutwardAction::new(kind, target(u), Some(relay))
                .with("ref", u.name.clone())
                .with("old", u.old.to_string())
                .with("new", u.new.to_string());
            match &options {
                Some(o) => a.with("push_options", o.clone()),
                None => a,
            }
        };
        // the push options: one more outward action on the repository
        let options_action = options.as_ref().map(|o| {
            OutwardAction::new(
                GIT_PUSH_OPTIONS,
                format!("{}/{}", cfg.authority(), path.repo),
                Some(relay),
            )
            .with("push_options", o.clone())
        });
        let options_policy = options_action
            .as_ref()
            .map(|a| gate.outward_policy(relay, a));

        // 2. all or nothing, before anything goes upstream: an update the
        // policy denies in every case refuses the whole push
        let denied: Vec<bool> = head
            .updates
            .iter()
            .map(|u| {
                // every candidate is asked (none skipped), then combined
                let answers: Vec<AskAnswer> = candidates(u)
                    .iter()
                    .map(|k| gate.outward_policy(relay, &action(k, u)))
                    .collect();
                answers.iter().all(|a| *a == AskAnswer::Deny)
            })
            .collect();
        let options_denied = options_policy == Some(AskAnswer::Deny);
        if denied.iter().any(|d| *d) || options_denied {
            let options_status = options_action.clone().map(|a| {
                let reason = if options_denied {
                    "the outward policy denies its push options (git.push_options)"
                } else {
                    ANOTHER_REF_REFUSED
                };
                ng(&gate.outward_refused(relay, a, reason))
            });
            let refs: Vec<(String, RefStatus)> = head
                .updates
                .iter()
                .zip(&denied)
                .map(|(u, d)| {
                    let kind = candidates(u).first().copied().unwrap_or(GIT_PUSH);
                    let status = if let (false, Some(why)) = (*d, &options_status)
                        && options_denied
                    {
                        gate.outward_refused(relay, action(kind, u), "its push options are denied");
                        why.clone()
                    } else if *d {
                        ng(&gate.outward_refused(
                            relay,
                            action(kind, u),
                            "the outward policy denies it",
                        ))
                    } else {
                        gate.outward_refused(relay, action(kind, u), ANOTHER_REF_REFUSED);
                        another()
                    };
                    (u.name.clone(), status)
                })
                .collect();
            drop(permit);
            reader.drain(drain_budget).await;
            record.outcome = RelayOutcome::OutwardDenied;
            record.reason = "outward_denied".into();
            return Ok(refused_push(&head, &refs));
        }

        // 3a. no pack (deletions only, or git's empty probe): decided
        // before a byte goes upstream
        let has_pack = head.updates.iter().any(|u| !u.new.is_zero());
        if !has_pack {
            let mut tail = BytesMut::from(&rest[..]);
            loop {
                match reader.next().await {
                    Next::Data(d) => {
                        if tail.len().saturating_add(d.len()) > MAX_PACKLESS_TAIL {
                            drop(permit);
                            reader.drain(drain_budget).await;
                            return Err(MALFORMED_PUSH);
                        }
                        if !permit.grow(d.len()) {
                            return Err(RELAY_BUSY);
                        }
                        tail.extend_from_slice(&d);
                    }
                    Next::End => break,
                    Next::Timeout => return Err(BODY_TIMEOUT),
                    Next::Failed => return Err(BODY_READ_FAILED),
                }
            }
            let decided = self
                .decide(&gate, &head, None, &action, options_action.as_ref())
                .await;
            let allowed = match decided {
                Ok(allowed) => allowed,
                Err(refs) => {
                    record.outcome = RelayOutcome::OutwardDenied;
                    record.reason = "outward_denied".into();
                    return Ok(refused_push(&head, &refs));
                }
            };
            let mut whole = BytesMut::with_capacity(head_bytes.len() + tail.len());
            whole.extend_from_slice(&head_bytes);
            whole.extend_from_slice(&tail);
            let whole = whole.freeze();
            record.bytes_up = whole.len() as u64;
            let up = builder
                .header(http::header::CONTENT_LENGTH, whole.len())
                .body(Full::new(whole).map_err(|e| match e {}).boxed())
                .map_err(|_| REBUILD_FAILED)?;
            let (mut sender, _conn) = self.open(record).await?;
            drop(permit);
            let resp = sender.send_request(up).await.map_err(|_| UNREACHABLE);
            return self.report_back(resp, &head, gate, allowed, None);
        }

        // 3b. a pack: streamed as it arrives, its trailer held back
        let (mut sender, conn) = match self.open(record).await {
            Ok(s) => s,
            Err(refusal) => {
                drop(permit);
                reader.drain(drain_budget).await;
                return Err(refusal);
            }
        };
        let (tx, rx) = mpsc::channel(1);
        let finished = Arc::new(AtomicBool::new(false));
        let taken = Arc::new(AtomicU64::new(0));
        let up = builder
            .body(
                StreamBody {
                    rx,
                    inner: self.inner.clone(),
                    finished: finished.clone(),
                    taken: taken.clone(),
                }
                .boxed(),
            )
            .map_err(|_| REBUILD_FAILED)?;
        let response = tokio::spawn(async move { sender.send_request(up).await });
        let mut upstream = Upstream {
            tx: Some(tx),
            finished,
            inner: self.inner.clone(),
            sent: 0,
            gone: false,
        };
        let mut scanner = PackScanner::new(head.object_format());
        let mut hold = HoldBack {
            keep: scanner.trailer_len(),
            held: BytesMut::new(),
        };
        // the head went into the budget while it was read; it is handed on
        // (and the budget share taken again per chunk) from here
        drop(permit);
        let abort = |upstream: &mut Upstream| {
            conn.abort();
            response.abort();
            upstream.cut();
        };
        if let Err(refusal) = upstream.send(head_bytes).await {
            abort(&mut upstream);
            return Err(refusal);
        }
        // the pack: its first bytes came with the head
        let mut pending = Some(rest);
        // pack streaming is bounded by the idle timeout and, overall, by
        // MAX_PACK_TIME (a large push takes long); the head's deadline was
        // the body timeout
        reader.deadline = Some(after(tokio::time::Instant::from_std(t0), MAX_PACK_TIME));
        // what the scanner keeps (commits, delta buffers, bookkeeping) is
        // charged to the relay's buffer budget as it grows, released when
        // the push ends (this permit dropped)
        let mut kept = BufferPermit {
            inner: self.inner.clone(),
            held: 0,
        };
        let mut bad_pack = false;
        let mut over_budget = false;
        loop {
            let data = match pending.take() {
                Some(d) => d,
                None => match reader.next().await {
                    Next::Data(d) => d,
                    Next::End => break,
                    Next::Timeout => {
                        abort(&mut upstream);
                        return Err(BODY_TIMEOUT);
                    }
                    Next::Failed => {
                        abort(&mut upstream);
                        return Err(BODY_READ_FAILED);
                    }
                },
            };
            if data.is_empty() {
                continue;
            }
            let free = cfg
                .max_buffered
                .saturating_sub(self.inner.buffered.load(Ordering::Acquire));
            let room = kept
                .held
                .saturating_add(free)
                .saturating_sub(scanner.kept_bytes());
            scanner.set_room(room);
            let budget_bound = room < crate::git::pack::MAX_COMMIT_BYTES;
            if let Err(e) = scanner.feed(&data) {
                over_budget = budget_bound && matches!(e, crate::git::GitError::TooLarge(_));
                bad_pack = true;
                break;
            }
            let now = scanner.kept_bytes();
            if now > kept.held && !kept.grow(now - kept.held) {
                over_budget = true;
                bad_pack = true;
                break;
            }
            for out in hold.push(data) {
                if let Err(refusal) = upstream.send(out).await {
                    abort(&mut upstream);
                    reader.drain(drain_budget).await;
                    return Err(refusal);
                }
            }
        }
        if bad_pack || scanner.finish().is_err() {
            abort(&mut upstream);
            drop(scanner);
            drop(kept);
            reader.drain(drain_budget).await;
            return Err(if over_budget {
                RELAY_BUSY
            } else {
                MALFORMED_PUSH
            });
        }
        record.bytes_up = upstream.sent;
        if upstream.gone {
            // the origin answered before the pack was whole (a refusal of
            // its own): nothing was applied, nothing is asked
            upstream.cut();
            conn.abort();
            return match response.await {
                Ok(Ok(resp)) => self.pass_back(resp),
                _ => Err(UNREACHABLE),
            };
        }

        // 4. the pack is whole: each update decided
        match self
            .decide(
                &gate,
                &head,
                Some(&scanner),
                &action,
                options_action.as_ref(),
            )
            .await
        {
            Err(refs) => {
                abort(&mut upstream);
                record.outcome = RelayOutcome::OutwardDenied;
                record.reason = "outward_denied".into();
                Ok(refused_push(&head, &refs))
            }
            Ok(allowed) => {
                let trailer = hold.release();
                if let Err(refusal) = upstream.send(trailer).await {
                    abort(&mut upstream);
                    return Err(refusal);
                }
                upstream.finish();
                record.bytes_up = upstream.sent;
                let resp = match response.await {
                    Ok(r) => r.map_err(|_| UNREACHABLE),
                    Err(_) => Err(UNREACHABLE),
                };
                // the origin's connection ended (or it stopped reading)
                // before the trailer was handed to it: the pack it holds
                // is truncated, so nothing was applied; the allowed
                // actions are not executed
                if upstream.gone || (resp.is_err() && taken.load(Ordering::Acquire) < upstream.sent)
                {
                    conn.abort();
                    upstream.cut();
                    return Err(ORIGIN_GONE);
                }
                let sent = upstream.sent;
                self.report_back(resp, &head, gate, allowed, Some((taken, sent)))
            }
        }
    }

    /// Decides each update of `head` with the gate, in order; after a
    /// refusal the rest are refused without asking. The allowed tickets
    /// and actions, or every ref's report line.
    ///
    /// The push options (`options`, a [`GIT_PUSH_OPTIONS`] action) ride in
    /// every update's detail. When their policy is not `allow` and some
    /// update would not be asked (its own policy allows it), they are
    /// decided first as an action of their own, so an `ask` on them always
    /// reaches the host; refused, the whole push is.
    async fn decide(
        &self,
        gate: &Arc<dyn RelayGate>,
        head: &PushHead,
        scanner: Option<&PackScanner>,
        action: &(impl Fn(&str, &RefUpdate) -> OutwardAction + Sync),
        options: Option<&OutwardAction>,
    ) -> Result<Vec<(u64, OutwardAction)>, Vec<(String, RefStatus)>> {
        let relay = self.inner.config.name.as_str();
        let mut allowed = Vec::new();
        let mut statuses: Vec<(String, Option<RefStatus>)> = Vec::new();
        let mut refused = false;
        if let Some(o) = options {
            let unasked = head.updates.iter().any(|u| {
                gate.outward_policy(relay, &action(classify(u, scanner), u)) != AskAnswer::Ask
            });
            if unasked && gate.outward_policy(relay, o) != AskAnswer::Allow {
                let answer = gate.outward(relay, o.clone()).await;
                if answer.decision != AskAnswer::Allow {
                    let why = ng(&answer);
                    for u in &head.updates {
                        gate.outward_refused(
                            relay,
                            action(classify(u, scanner), u),
                            "its push options are refused",
                        );
                    }
                    return Err(head
                        .updates
                        .iter()
                        .map(|u| (u.name.clone(), why.clone()))
                        .collect());
                }
                allowed.push((answer.ticket, o.clone()));
            }
        }
        for u in &head.updates {
            let a = action(classify(u, scanner), u);
            if refused {
                gate.outward_refused(relay, a, ANOTHER_REF_REFUSED);
                statuses.push((u.name.clone(), Some(another())));
                continue;
            }
            let answer = gate.outward(relay, a.clone()).await;
            if answer.decision == AskAnswer::Allow {
                allowed.push((answer.ticket, a));
                statuses.push((u.name.clone(), None));
            } else {
                refused = true;
                statuses.push((u.name.clone(), Some(ng(&answer))));
            }
        }
        if refused {
            Err(statuses
                .into_iter()
                .map(|(n, s)| (n, s.unwrap_or_else(another)))
                .collect())
        } else {
            Ok(allowed)
        }
    }

    /// The origin's answer to an allowed push, passed back unchanged while
    /// its report is read; each allowed ref is reported executed.
    fn report_back(
        &self,
        resp: Result<Response<hyper::body::Incoming>, Refusal>,
        head: &PushHead,
        gate: Arc<dyn RelayGate>,
        allowed: Vec<(u64, OutwardAction)>,
        trailer: Option<(Arc<AtomicU64>, u64)>,
    ) -> Result<Response<RelayBody>, Refusal> {
        let relay = self.inner.config.name.clone();
        let unknown = |status: Option<i32>| {
            for (ticket, action) in &allowed {
                let mut detail = BTreeMap::new();
                detail.insert("result".to_owned(), "unknown".to_owned());
                gate.outward_executed(&relay, *ticket, action, &OutwardResult { status, detail });
            }
        };
        let resp = match resp {
            Ok(r) => r,
            Err(refusal) => {
                unknown(None);
                return Err(refusal);
            }
        };
        let status = resp.status().as_u16();
        let (parts, body) = match self.clean_response(resp) {
            Ok(p) => p,
            Err(refusal) => {
                unknown(Some(i32::from(status)));
                return Err(refusal);
            }
        };
        let body = ReportBody {
            inner: body,
            reader: ReportReader::new(&head.capabilities),
            readable: true,
            gate,
            relay,
            status,
            allowed,
            reported: false,
            trailer,
        };
        Ok(Response::from_parts(parts, body.boxed()))
    }
}

const ORIGIN_GONE: Refusal = (
    StatusCode::BAD_GATEWAY,
    "upstream_gone",
    "The origin's connection ended before the push was complete; nothing of it was applied",
);
const UNREACHABLE: Refusal = (
    StatusCode::BAD_GATEWAY,
    "upstream_unreachable",
    "Relay upstream unreachable",
);
const REBUILD_FAILED: Refusal = (
    StatusCode::BAD_REQUEST,
    "bad_request",
    "The request could not be rebuilt",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_paths_are_the_three_smart_http_routes() {
        let get = Method::GET;
        let post = Method::POST;
        let ok =
            |m: &Method, p: &str, q: Option<&str>| parse_path(m, p, q).map(|g| (g.repo, g.service));
        assert_eq!(
            ok(
                &get,
                "/acme/app.git/info/refs",
                Some("service=git-upload-pack")
            ),
            Ok(("acme/app".into(), Service::InfoRefs))
        );
        assert_eq!(
            ok(
                &get,
                "/acme/app/info/refs",
                Some("service=git-receive-pack")
            ),
            Ok(("acme/app".into(), Service::InfoRefs))
        );
        assert_eq!(
            ok(&post, "/acme/app.git/git-upload-pack", None),
            Ok(("acme/app".into(), Service::UploadPack))
        );
        assert_eq!(
            ok(&post, "/acme/app/git-receive-pack", None),
            Ok(("acme/app".into(), Service::ReceivePack))
        );
        // `.git` in any case is the same repository (git accepts it)
        for p in [
            "/acme/app.GIT/git-receive-pack",
            "/acme/app.Git/git-receive-pack",
        ] {
            assert_eq!(
                ok(&post, p, None),
                Ok(("acme/app".into(), Service::ReceivePack)),
                "{p}"
            );
        }
        // positive control: a name that only contains `git` keeps it
        assert_eq!(
            ok(&post, "/acme/appgit/git-receive-pack", None),
            Ok(("acme/appgit".into(), Service::ReceivePack))
        );
        for (m, p, q) in [
            (&get, "/acme/app.git/info/refs", None),
            (
                &get,
                "/acme/app.git/info/refs",
                Some("service=git-upload-archive"),
            ),
            (&get, "/acme/app.git/HEAD", None),
            (&get, "/acme/app.git/objects/info/packs", None),
            (&post, "/acme/../git-receive-pack", None),
            (&post, "/acme/.git/git-receive-pack", None),
            (&post, "/acme/.GIT/git-receive-pack", None),
            (&post, "/acme/app/x/git-receive-pack", None),
            (&post, "/acme/a%2fb/git-receive-pack", None),
            (&post, "/acme/app/git-receive-pack", Some("x=1")),
            (&post, "//app/git-receive-pack", None),
            (&post, "/acme/app/git-receive-pack/", None),
        ] {
            assert_eq!(parse_path(m, p, q), Err(NOT_GIT), "{m} {p} {q:?}");
        }
        assert_eq!(
            parse_path(&get, "/acme/app/git-receive-pack", None),
            Err(GIT_METHOD)
        );
        assert_eq!(
            parse_path(
                &post,
                "/acme/app/info/refs",
                Some("service=git-upload-pack")
            ),
            Err(GIT_METHOD)
        );
    }

    #[test]
    fn repos_globs_serve_only_what_they_match() {
        let g = |s: &str| TargetGlob::parse(s).unwrap();
        let all = GitSettings::default();
        assert!(all.serves("anyone/anything"));
        let some = GitSettings::new(vec![g("acme/*"), g("solo/tool")]);
        assert!(some.serves("acme/app"));
        assert!(some.serves("solo/tool"));
        assert!(!some.serves("solo/other"));
        assert!(!some.serves("evil/app"));
        assert!(!some.serves("ACME/app"), "allow globs are case-sensitive");
    }

    #[test]
    fn the_trailer_is_held_back_across_chunk_sizes() {
        for sizes in [
            &[1usize, 1, 1, 50][..],
            &[100],
            &[3, 30, 2, 2, 2, 60],
            &[20],
            &[25, 1],
        ] {
            let total: usize = sizes.iter().sum();
            let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
            let mut hold = HoldBack {
                keep: 20,
                held: BytesMut::new(),
            };
            let mut out = Vec::new();
            let mut at = 0;
            for n in sizes {
                for b in hold.push(Bytes::copy_from_slice(&data[at..at + n])) {
                    out.extend_from_slice(&b);
                }
                at += n;
                assert_eq!(out.len(), at.saturating_sub(20), "{sizes:?}");
            }
            out.extend_from_slice(&hold.release());
            assert_eq!(out, data, "{sizes:?}");
        }
    }
}
