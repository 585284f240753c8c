//! Moving the bytes of an established tunnel, metered against the byte
//! limits and watched by the idle timeout and the shutdown signal.
//!
//! Each direction starts by copying through a small user-space buffer, so
//! idle and chatty tunnels stay cheap. When a read fills that buffer (a bulk
//! transfer) and both ends are sockets, the direction switches to
//! `splice(2)`: socket → pipe → socket inside the kernel, no copy through
//! user space. Every splice into the pipe is capped by the remaining byte
//! budget and every byte is metered before it leaves the pipe, so a limit
//! still cuts at the exact byte. Where a pipe cannot be made (e.g. out of
//! descriptors) the direction keeps copying with a larger buffer.

use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::sys::socket::MsgFlags;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::{Inner, ShutdownSignal};
use crate::body::BodyFramer;
use crate::record::CloseReason;

/// A client connection; the ones accepted by [`super::Proxy::serve`] are
/// sockets the tunnel may splice.
pub(super) trait Conn: AsyncRead + AsyncWrite + Unpin + Send {
    /// The socket behind the stream, if there is one.
    fn sock(&self) -> Option<Sock<'_>> {
        None
    }
}

impl Conn for TcpStream {
    fn sock(&self) -> Option<Sock<'_>> {
        Some(Sock::Tcp(self))
    }
}

impl Conn for UnixStream {
    fn sock(&self) -> Option<Sock<'_>> {
        Some(Sock::Unix(self))
    }
}

/// Any other stream ([`super::Proxy::handle`]): always copied.
pub(super) struct Opaque<S>(pub(super) S);

impl<S: AsyncRead + Unpin> AsyncRead for Opaque<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Opaque<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Conn for Opaque<S> {}

/// A socket end of a tunnel, used through readiness and non-blocking calls.
#[derive(Clone, Copy)]
pub(super) enum Sock<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

impl Sock<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Unix(s) => s.as_fd(),
        }
    }

    async fn ready(&self, interest: Interest) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.ready(interest).await.map(drop),
            Self::Unix(s) => s.ready(interest).await.map(drop),
        }
    }

    /// Runs a non-blocking call once the socket is ready for `interest`,
    /// waiting again while it would block.
    async fn io<R>(
        &self,
        interest: Interest,
        mut f: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            self.ready(interest).await?;
            let res = match self {
                Self::Tcp(s) => s.try_io(interest, &mut f),
                Self::Unix(s) => s.try_io(interest, &mut f),
            };
            match res {
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd();
        self.io(Interest::READABLE, || {
            nix::unistd::read(fd, buf).map_err(io::Error::from)
        })
        .await
    }

    async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        let fd = self.fd();
        while !buf.is_empty() {
            let n = self
                .io(Interest::WRITABLE, || {
                    // As tokio does: a closed peer is an error, not SIGPIPE.
                    nix::sys::socket::send(fd.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL)
                        .map_err(io::Error::from)
                })
                .await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = buf.get(n..).unwrap_or_default();
        }
        Ok(())
    }

    fn loopback_peer(&self) -> bool {
        match self {
            Self::Tcp(s) => s.peer_addr().is_ok_and(|a| match a.ip() {
                std::net::IpAddr::V4(v4) => v4.is_loopback(),
                std::net::IpAddr::V6(v6) => {
                    v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
                }
            }),
            Self::Unix(_) => false,
        }
    }

    fn shutdown_write(&self) {
        let _ =
            nix::sys::socket::shutdown(self.fd().as_raw_fd(), nix::sys::socket::Shutdown::Write);
    }
}

/// A dialled upstream connection.
pub(super) struct Upstream {
    pub(super) stream: TcpStream,
    /// The connect handshake took less than [`NEAR_RTT`].
    pub(super) near: bool,
}

/// Round trips below this count as a near path (loopback, the same host,
/// a LAN segment).
pub(super) const NEAR_RTT: Duration = Duration::from_micros(200);

/// `SO_RCVBUF` / `SO_SNDBUF` for a near socket once a direction turns bulk
/// (the kernel doubles it): at a 200 µs round trip this still allows
/// about 10 Gbit/s. Left to itself, the kernel's autotuning grows the
/// buffers of a fast local path to many MiB; in a relay that only queues
/// bytes inside the host, and relayed bytes fall out of the CPU cache
/// before they are forwarded. Far paths keep autotuning (their
/// bandwidth-delay product needs it).
const NEAR_BUF: usize = 256 * 1024;

/// Fix the buffers a bulk direction uses on near sockets.
fn pin_buffers(src: Sock<'_>, src_near: bool, dst: Sock<'_>, dst_near: bool) {
    use nix::sys::socket::{setsockopt, sockopt};
    if src_near && let Sock::Tcp(s) = src {
        let _ = setsockopt(s, sockopt::RcvBuf, &NEAR_BUF);
    }
    if dst_near && let Sock::Tcp(s) = dst {
        let _ = setsockopt(s, sockopt::SndBuf, &NEAR_BUF);
    }
}

/// Shared counters of one tunnel.
pub(super) struct Meter<'a> {
    inner: &'a Inner,
    conn: AtomicU64,
    last: AtomicU64,
    t0: Instant,
    /// A limit was crossed: directions stop before their next read.
    stopping: AtomicBool,
}

impl Meter<'_> {
    /// `Err(Limit)` once the other direction crossed a limit.
    fn check(&self) -> Result<(), DirEnd> {
        if self.stopping.load(Ordering::Relaxed) {
            Err(DirEnd::Limit)
        } else {
            Ok(())
        }
    }

    /// Reserve up to `n` bytes; returns how many may pass.
    fn take(&self, n: u64) -> u64 {
        let l = &self.inner.config.limits;
        let mut allowed = n;
        let before = self.conn.fetch_add(n, Ordering::Relaxed);
        if let Some(c) = l.bytes_per_connection {
            allowed = allowed.min(c.saturating_sub(before));
        }
        let sbefore = self.inner.session_bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(s) = l.bytes_per_session {
            allowed = allowed.min(s.saturating_sub(sbefore));
        }
        if allowed < n {
            // give back what did not pass so counters match what moved
            self.conn.fetch_sub(n - allowed, Ordering::Relaxed);
            self.inner
                .session_bytes
                .fetch_sub(n - allowed, Ordering::Relaxed);
        }
        self.touch();
        allowed
    }

    /// Bytes that may still pass now (`None`: unlimited). Another direction
    /// or connection may use some before this one [`Self::take`]s them.
    fn remaining(&self) -> Option<u64> {
        self.inner
            .remaining_budget(self.conn.load(Ordering::Relaxed))
    }

    fn touch(&self) {
        let ms = u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Relaxed)))
    }
}

/// What one direction has moved, and whether it holds metered bytes it
/// has not finished writing.
#[derive(Default)]
struct Flow {
    moved: AtomicU64,
    busy: AtomicBool,
}

impl Flow {
    /// Bytes were metered and are about to be written.
    fn start(&self) {
        self.busy.store(true, Ordering::Relaxed);
    }

    /// `n` metered bytes were written.
    fn done(&self, n: u64) {
        self.moved.fetch_add(n, Ordering::Relaxed);
        self.busy.store(false, Ordering::Relaxed);
    }
}

/// How one direction ended early.
pub(super) enum DirEnd {
    Limit,
    ReadErr,
    WriteErr,
}

const SMALL_BUF: usize = 8 * 1024;
const BIG_BUF: usize = 256 * 1024;
/// Requested pipe capacity for spliced directions (the kernel may grant
/// less; pages are only allocated while bytes sit in the pipe).
const PIPE_SIZE: usize = 1024 * 1024;

/// A copy loop for streams that are not sockets.
async fn copy_dir<R, W>(r: &mut R, w: &mut W, meter: &Meter<'_>, flow: &Flow) -> Result<(), DirEnd>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Start small so idle tunnels stay cheap; grow once a read fills the buffer.
    let mut buf = vec![0u8; SMALL_BUF];
    loop {
        meter.check()?;
        let n = r.read(&mut buf).await.map_err(|_| DirEnd::ReadErr)?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        flow.start();
        let allowed = meter.take(n as u64);
        let pass = usize::try_from(allowed).unwrap_or(n).min(n);
        w.write_all(buf.get(..pass).unwrap_or_default())
            .await
            .map_err(|_| DirEnd::WriteErr)?;
        flow.done(pass as u64);
        if pass < n {
            return Err(DirEnd::Limit);
        }
        if n == buf.len() && buf.len() < BIG_BUF {
            buf.resize(BIG_BUF, 0);
        }
    }
}

/// When a socket direction switches from copying to splicing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Copy small reads; splice once a read fills the small buffer.
    Adaptive,
    /// Splice from the first byte (tests).
    #[cfg(test)]
    SpliceAlways,
    /// Never splice (tests: the fallback when no pipe can be made).
    #[cfg(test)]
    CopyOnly,
}

/// One direction between two sockets.
async fn sock_dir(
    (src, src_near): (Sock<'_>, bool),
    (dst, dst_near): (Sock<'_>, bool),
    meter: &Meter<'_>,
    flow: &Flow,
    mode: Mode,
) -> Result<(), DirEnd> {
    let mut buf = Vec::new();
    if mode == Mode::Adaptive {
        buf.resize(SMALL_BUF, 0);
        loop {
            match copy_once(src, dst, &mut buf, meter, flow).await? {
                Step::Eof => return Ok(()),
                Step::Full => break,
                Step::Partial => {}
            }
        }
    }
    #[cfg(test)]
    let want_pipe = mode != Mode::CopyOnly;
    #[cfg(not(test))]
    let want_pipe = true;
    pin_buffers(src, src_near, dst, dst_near);
    if want_pipe && let Ok(pipe) = Pipe::new() {
        drop(buf);
        return splice_dir(src, dst, &pipe, meter, flow).await;
    }
    buf.resize(BIG_BUF, 0);
    loop {
        if copy_once(src, dst, &mut buf, meter, flow).await? == Step::Eof {
            return Ok(());
        }
    }
}

#[derive(PartialEq, Eq)]
enum Step {
    Eof,
    /// The read filled the buffer: a bulk transfer.
    Full,
    Partial,
}

/// Read once, meter, write what may pass.
async fn copy_once(
    src: Sock<'_>,
    dst: Sock<'_>,
    buf: &mut [u8],
    meter: &Meter<'_>,
    flow: &Flow,
) -> Result<Step, DirEnd> {
    meter.check()?;
    let n = src.read(buf).await.map_err(|_| DirEnd::ReadErr)?;
    if n == 0 {
        dst.shutdown_write();
        return Ok(Step::Eof);
    }
    flow.start();
    let allowed = meter.take(n as u64);
    let pass = usize::try_from(allowed).unwrap_or(n).min(n);
    dst.write_all(buf.get(..pass).unwrap_or_default())
        .await
        .map_err(|_| DirEnd::WriteErr)?;
    flow.done(pass as u64);
    if pass < n {
        return Err(DirEnd::Limit);
    }
    Ok(if n == buf.len() {
        Step::Full
    } else {
        Step::Partial
    })
}

/// A non-blocking pipe for splicing.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A bigger pipe moves more per call; keep the default if refused.
        let size = i32::try_from(PIPE_SIZE).unwrap_or(i32::MAX);
        let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(size));
        Ok(Self { r, w })
    }
}

/// Splice `src` → pipe → `dst`. The pipe is empty whenever this reads, so
/// a splice into it never waits on the pipe, only on `src`.
///
/// `splice(2)` into a socket whose peer is gone raises `SIGPIPE` (it has
/// no `MSG_NOSIGNAL`); Rust programs ignore `SIGPIPE` from start-up, so it
/// surfaces as `EPIPE` here. A host program that restores the default
/// action must not run the proxy in its process.
async fn splice_dir(
    src: Sock<'_>,
    dst: Sock<'_>,
    pipe: &Pipe,
    meter: &Meter<'_>,
    flow: &Flow,
) -> Result<(), DirEnd> {
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let src_fd = src.fd();
    let dst_fd = dst.fd();
    loop {
        meter.check()?;
        let want = match meter.remaining() {
            None => PIPE_SIZE,
            Some(r) => usize::try_from(r).unwrap_or(PIPE_SIZE).min(PIPE_SIZE),
        };
        if want == 0 {
            // The budget is spent: end of stream completes the direction,
            // one more byte crosses the limit (as in the copy loop).
            let mut one = [0u8; 1];
            return match copy_once(src, dst, &mut one, meter, flow).await? {
                Step::Eof => Ok(()),
                Step::Full | Step::Partial => Err(DirEnd::Limit),
            };
        }
        let n = src
            .io(Interest::READABLE, || {
                splice(src_fd, None, &pipe.w, None, want, flags).map_err(io::Error::from)
            })
            .await
            .map_err(|_| DirEnd::ReadErr)?;
        if n == 0 {
            dst.shutdown_write();
            return Ok(());
        }
        flow.start();
        let allowed = meter.take(n as u64);
        let pass = usize::try_from(allowed).unwrap_or(n).min(n);
        let mut left = pass;
        while left > 0 {
            let m = dst
                .io(Interest::WRITABLE, || {
                    splice(&pipe.r, None, dst_fd, None, left, flags).map_err(io::Error::from)
                })
                .await
                .map_err(|_| DirEnd::WriteErr)?;
            if m == 0 {
                return Err(DirEnd::WriteErr);
            }
            left = left.saturating_sub(m);
            flow.moved.fetch_add(m as u64, Ordering::Relaxed);
        }
        flow.done(0);
        if pass < n {
            // What did not pass stays in the pipe and is dropped with it.
            return Err(DirEnd::Limit);
        }
    }
}

/// Pump bytes both ways until both directions end, a limit is crossed,
/// the tunnel idles out or the proxy shuts down. `first_up` (a peeked
/// ClientHello, a rewritten request head) is sent upstream first. With a
/// `body` framer (plain HTTP) the client's bytes are forwarded only up to
/// the end of that request's body; later bytes (a pipelined request) are
/// read and dropped, never forwarded.
pub(super) async fn pump<S: Conn>(
    client: &mut S,
    upstream: &mut Upstream,
    first_up: &[u8],
    body: Option<BodyFramer>,
    inner: &Inner,
    signal: ShutdownSignal,
) -> (u64, u64, CloseReason) {
    let near = upstream.near;
    pump_inner(
        client,
        (&mut upstream.stream, near),
        first_up,
        body,
        inner,
        signal,
        Mode::Adaptive,
    )
    .await
}

#[cfg(test)]
pub(super) async fn pump_with<S: Conn>(
    client: &mut S,
    upstream: (&mut TcpStream, bool),
    first_up: &[u8],
    inner: &Inner,
    signal: ShutdownSignal,
    mode: Mode,
) -> (u64, u64, CloseReason) {
    pump_inner(client, upstream, first_up, None, inner, signal, mode).await
}

async fn pump_inner<S: Conn>(
    client: &mut S,
    (upstream, upstream_near): (&mut TcpStream, bool),
    first_up: &[u8],
    body: Option<BodyFramer>,
    inner: &Inner,
    signal: ShutdownSignal,
    mode: Mode,
) -> (u64, u64, CloseReason) {
    let meter = Meter {
        inner,
        conn: AtomicU64::new(0),
        last: AtomicU64::new(0),
        t0: Instant::now(),
        stopping: AtomicBool::new(false),
    };
    let up_flow = Flow::default();
    let down_flow = Flow::default();
    if !first_up.is_empty() {
        let n = first_up.len() as u64;
        let allowed = meter.take(n);
        let pass = usize::try_from(allowed).unwrap_or(0).min(first_up.len());
        if upstream
            .write_all(first_up.get(..pass).unwrap_or_default())
            .await
            .is_err()
        {
            return (0, 0, CloseReason::UpstreamError);
        }
        up_flow.done(pass as u64);
        if allowed < n {
            return (pass as u64, 0, CloseReason::LimitExceeded);
        }
    }
    let idle = inner.config.limits.idle_timeout;
    let close = if let Some(c) = client.sock() {
        let u = (Sock::Tcp(upstream), upstream_near);
        // A TCP client on loopback is as near as it gets.
        let c = (c, c.loopback_peer());
        let up = async {
            match body {
                Some(mut framer) => framed_sock_dir(c.0, u.0, &mut framer, &meter, &up_flow).await,
                None => sock_dir(c, u, &meter, &up_flow, mode).await,
            }
        };
        let down = sock_dir(u, c, &meter, &down_flow, mode);
        drive((up, &up_flow), (down, &down_flow), &meter, idle, signal).await
    } else {
        let (mut cr, mut cw) = tokio::io::split(client);
        let (mut ur, mut uw) = upstream.split();
        let up = async {
            match body {
                Some(mut framer) => {
                    framed_copy_dir(&mut cr, &mut uw, &mut framer, &meter, &up_flow).await
                }
                None => copy_dir(&mut cr, &mut uw, &meter, &up_flow).await,
            }
        };
        let down = copy_dir(&mut ur, &mut cw, &meter, &down_flow);
        drive((up, &up_flow), (down, &down_flow), &meter, idle, signal).await
    };
    (
        up_flow.moved.load(Ordering::Relaxed),
        down_flow.moved.load(Ordering::Relaxed),
        close,
    )
}

/// How much of `buf` the next read of a framed body may fill: never past
/// a known end, so a `Content-Length` body is read exactly.
fn framed_room(framer: &BodyFramer, buf: &[u8]) -> usize {
    framer
        .remaining_hint()
        .and_then(|r| usize::try_from(r).ok())
        .map_or(buf.len(), |r| r.clamp(1, buf.len()))
}

/// The client → upstream direction of a plain-HTTP request between two
/// sockets: the body up to its end, metered; then the client's later bytes
/// are drained (so closing does not reset the connection under the
/// response) and dropped.
async fn framed_sock_dir(
    src: Sock<'_>,
    dst: Sock<'_>,
    framer: &mut BodyFramer,
    meter: &Meter<'_>,
    flow: &Flow,
) -> Result<(), DirEnd> {
    let mut buf = vec![0u8; SMALL_BUF];
    while !framer.is_done() {
        meter.check()?;
        let room = framed_room(framer, &buf);
        let slot = buf.get_mut(..room).unwrap_or_default();
        let n = src.read(slot).await.map_err(|_| DirEnd::ReadErr)?;
        if n == 0 {
            dst.shutdown_write();
            return Ok(());
        }
        let got = slot.get(..n).unwrap_or_default();
        let body = framer.feed(got).map_err(|_| DirEnd::ReadErr)?;
        flow.start();
        let allowed = meter.take(body as u64);
        let pass = usize::try_from(allowed).unwrap_or(body).min(body);
        dst.write_all(got.get(..pass).unwrap_or_default())
            .await
            .map_err(|_| DirEnd::WriteErr)?;
        flow.done(pass as u64);
        if pass < body {
            return Err(DirEnd::Limit);
        }
    }
    loop {
        meter.check()?;
        match src.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
    }
}

/// [`framed_sock_dir`] for streams that are not sockets.
async fn framed_copy_dir<R, W>(
    r: &mut R,
    w: &mut W,
    framer: &mut BodyFramer,
    meter: &Meter<'_>,
    flow: &Flow,
) -> Result<(), DirEnd>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; SMALL_BUF];
    while !framer.is_done() {
        meter.check()?;
        let room = framed_room(framer, &buf);
        let slot = buf.get_mut(..room).unwrap_or_default();
        let n = r.read(slot).await.map_err(|_| DirEnd::ReadErr)?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        let got = slot.get(..n).unwrap_or_default();
        let body = framer.feed(got).map_err(|_| DirEnd::ReadErr)?;
        flow.start();
        let allowed = meter.take(body as u64);
        let pass = usize::try_from(allowed).unwrap_or(body).min(body);
        w.write_all(got.get(..pass).unwrap_or_default())
            .await
            .map_err(|_| DirEnd::WriteErr)?;
        flow.done(pass as u64);
        if pass < body {
            return Err(DirEnd::Limit);
        }
    }
    loop {
        meter.check()?;
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
    }
}

/// How long a direction may take to finish writing bytes it metered
/// before the other direction crossed a limit.
const LIMIT_GRACE: Duration = Duration::from_secs(1);

/// Runs both directions to their end, with the idle timeout and shutdown.
///
/// When one direction crosses a byte limit, the other may be halfway
/// through writing bytes it already metered: it finishes that write (so
/// the bytes counted are the bytes moved; at most [`LIMIT_GRACE`]) and
/// then stops before its next read; a direction waiting to read stops at
/// once.
async fn drive<U, D>(
    (up, up_flow): (U, &Flow),
    (down, down_flow): (D, &Flow),
    meter: &Meter<'_>,
    idle: Duration,
    mut signal: ShutdownSignal,
) -> CloseReason
where
    U: Future<Output = Result<(), DirEnd>>,
    D: Future<Output = Result<(), DirEnd>>,
{
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let mut limit = false;
    let mut limit_at: Option<tokio::time::Instant> = None;
    loop {
        if up_done && down_done {
            break if limit {
                CloseReason::LimitExceeded
            } else {
                CloseReason::Completed
            };
        }
        if limit
            && (up_done || !up_flow.busy.load(Ordering::Relaxed))
            && (down_done || !down_flow.busy.load(Ordering::Relaxed))
        {
            break CloseReason::LimitExceeded;
        }
        let wait = idle
            .saturating_sub(meter.idle_for())
            .max(Duration::from_millis(10));
        let wait = match limit_at {
            Some(at) => {
                wait.min((at + LIMIT_GRACE).saturating_duration_since(tokio::time::Instant::now()))
            }
            None => wait,
        };
        let ended = tokio::select! {
            r = &mut up, if !up_done => {
                up_done = true;
                match r {
                    Ok(()) => None,
                    Err(DirEnd::Limit) => {
                        limit = true;
                        None
                    }
                    Err(DirEnd::ReadErr) => Some(CloseReason::ClientError),
                    Err(DirEnd::WriteErr) => Some(CloseReason::UpstreamError),
                }
            },
            r = &mut down, if !down_done => {
                down_done = true;
                match r {
                    Ok(()) => None,
                    Err(DirEnd::Limit) => {
                        limit = true;
                        None
                    }
                    Err(DirEnd::ReadErr) => Some(CloseReason::UpstreamError),
                    Err(DirEnd::WriteErr) => Some(CloseReason::ClientError),
                }
            },
            () = tokio::time::sleep(wait) => {
                let graced = limit_at.is_some_and(|at| at.elapsed() >= LIMIT_GRACE);
                (graced || meter.idle_for() >= idle).then_some(CloseReason::IdleTimeout)
            }
            () = signal.wait() => Some(CloseReason::Shutdown),
        };
        if limit && limit_at.is_none() {
            meter.stopping.store(true, Ordering::Relaxed);
            limit_at = Some(tokio::time::Instant::now());
        }
        if let Some(reason) = ended {
            break if limit {
                CloseReason::LimitExceeded
            } else {
                reason
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::decide::HostRules;
    use crate::proxy::{Limits, Proxy, ProxyConfig, shutdown_channel};
    use crate::record::MemoryRecorder;
    use crate::resolve::StaticResolver;

    fn proxy(limits: Limits) -> Proxy {
        let config = ProxyConfig {
            limits,
            ..ProxyConfig::default()
        };
        let rules = HostRules::new(&["x.test:1"], &[] as &[&str]).unwrap();
        Proxy::new(
            config,
            Arc::new(rules),
            Arc::new(StaticResolver::new()),
            Arc::new(MemoryRecorder::new()),
        )
    }

    /// Two connected TCP sockets on loopback.
    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| u8::try_from(i % 251).unwrap().wrapping_add(seed))
            .collect()
    }

    /// What the far ends saw and what the pump reported.
    struct Outcome {
        at_origin: Vec<u8>,
        at_client: Vec<u8>,
        up: u64,
        down: u64,
        close: CloseReason,
        session: u64,
    }

    /// Runs one tunnel: the client sends `up` then closes its write side,
    /// the origin sends `down` then closes its write side; each end reads
    /// until EOF. `client_unix` puts a Unix socket on the client side.
    async fn run(
        limits: Limits,
        mode: Mode,
        first_up: &[u8],
        up: Vec<u8>,
        down: Vec<u8>,
        client_unix: bool,
    ) -> Outcome {
        let p = proxy(limits);
        let (mut origin, mut proxy_up) = tcp_pair().await;
        let (_shutdown, signal) = shutdown_channel();
        let origin_task = tokio::spawn(async move {
            let (mut r, mut w) = origin.split();
            let send = async {
                let _ = w.write_all(&down).await;
                let _ = w.shutdown().await;
            };
            let mut got = Vec::new();
            let recv = r.read_to_end(&mut got);
            let ((), _) = tokio::join!(send, recv);
            got
        });
        let (at_client, (up_n, down_n, close)) = if client_unix {
            let (a, mut b) = UnixStream::pair().unwrap();
            let client = tokio::spawn(client_side(Box::new(a), up));
            let r = pump_with(
                &mut b,
                (&mut proxy_up, true),
                first_up,
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop(b);
            drop(proxy_up);
            (client.await.unwrap(), r)
        } else {
            let (a, mut b) = tcp_pair().await;
            let client = tokio::spawn(client_side(Box::new(a), up));
            let r = pump_with(
                &mut b,
                (&mut proxy_up, true),
                first_up,
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop(b);
            drop(proxy_up);
            (client.await.unwrap(), r)
        };
        Outcome {
            at_origin: origin_task.await.unwrap(),
            at_client,
            up: up_n,
            down: down_n,
            close,
            session: p.session_bytes(),
        }
    }

    /// Sends `up`, closes the write side, reads until EOF.
    async fn client_side(mut c: Box<dyn crate::proxy::Stream>, up: Vec<u8>) -> Vec<u8> {
        let (mut r, mut w) = tokio::io::split(&mut c);
        let send = async {
            let _ = w.write_all(&up).await;
            let _ = w.shutdown().await;
        };
        let mut got = Vec::new();
        let recv = r.read_to_end(&mut got);
        let ((), _) = tokio::join!(send, recv);
        got
    }

    const MODES: [Mode; 3] = [Mode::SpliceAlways, Mode::Adaptive, Mode::CopyOnly];

    #[tokio::test]
    async fn bulk_both_ways_arrives_intact_and_counted_in_every_mode() {
        for mode in MODES {
            for unix in [false, true] {
                let up = pattern(3 << 20, 1);
                let down = pattern(5 << 20, 7);
                let o = run(Limits::default(), mode, b"", up.clone(), down.clone(), unix).await;
                assert_eq!(o.close, CloseReason::Completed, "{mode:?} unix={unix}");
                assert!(o.at_origin == up, "{mode:?} unix={unix}: upload corrupted");
                assert!(
                    o.at_client == down,
                    "{mode:?} unix={unix}: download corrupted"
                );
                assert_eq!((o.up, o.down), (3 << 20, 5 << 20));
                assert_eq!(o.session, 8 << 20);
            }
        }
    }

    #[tokio::test]
    async fn a_connection_limit_cuts_inside_a_splice_at_the_exact_byte() {
        let limit = 300_007_u64;
        for mode in MODES {
            for unix in [false, true] {
                let down = pattern(2 << 20, 3);
                let limits = Limits {
                    bytes_per_connection: Some(limit),
                    ..Limits::default()
                };
                let o = run(limits.clone(), mode, b"", Vec::new(), down.clone(), unix).await;
                assert_eq!(o.close, CloseReason::LimitExceeded, "{mode:?} unix={unix}");
                assert_eq!(o.down, limit, "{mode:?} unix={unix}");
                assert_eq!(o.at_client.len() as u64, limit, "{mode:?} unix={unix}");
                assert!(o.at_client == down.get(..300_007).unwrap());
                assert_eq!(o.session, limit);
                // Positive control: exactly the budget, then end of stream,
                // completes without crossing the limit.
                let exact = pattern(usize::try_from(limit).unwrap(), 3);
                let o = run(limits, mode, b"", Vec::new(), exact.clone(), unix).await;
                assert_eq!(o.close, CloseReason::Completed, "{mode:?} unix={unix}");
                assert!(o.at_client == exact);
            }
        }
    }

    #[tokio::test]
    async fn a_limit_counts_both_directions_and_the_peeked_bytes() {
        for mode in MODES {
            let first = b"\x16\x03\x01peeked-client-hello";
            let up = pattern(200_000, 9);
            let limits = Limits {
                bytes_per_connection: Some(100_000),
                ..Limits::default()
            };
            let o = run(limits, mode, first, up.clone(), Vec::new(), false).await;
            assert_eq!(o.close, CloseReason::LimitExceeded, "{mode:?}");
            assert_eq!(o.up, 100_000);
            let mut want = first.to_vec();
            want.extend_from_slice(&up);
            want.truncate(100_000);
            assert!(o.at_origin == want, "{mode:?}: upload not cut exactly");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_limit_shared_by_two_busy_directions_is_exact() {
        for mode in MODES {
            for _ in 0..5 {
                let limits = Limits {
                    bytes_per_connection: Some(1_000_003),
                    ..Limits::default()
                };
                let up = pattern(4 << 20, 1);
                let down = pattern(4 << 20, 2);
                let o = run(limits, mode, b"", up.clone(), down.clone(), false).await;
                assert_eq!(o.close, CloseReason::LimitExceeded, "{mode:?}");
                assert_eq!(o.up + o.down, 1_000_003, "{mode:?}");
                assert_eq!(o.session, 1_000_003);
                // Closing a socket with unread input resets it, so an end
                // may lose the last bytes in flight, never get more.
                assert!(o.at_origin.len() as u64 <= o.up, "{mode:?}");
                assert!(o.at_client.len() as u64 <= o.down, "{mode:?}");
                assert!(o.at_origin == up.get(..o.at_origin.len()).unwrap());
                assert!(o.at_client == down.get(..o.at_client.len()).unwrap());
            }
        }
    }

    #[tokio::test]
    async fn a_limit_cuts_within_the_grace_when_the_other_side_never_reads() {
        for mode in MODES {
            let p = proxy(Limits {
                bytes_per_connection: Some(3 << 20),
                ..Limits::default()
            });
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            // The origin floods the client, which never reads; the client
            // uploads past the limit.
            let o = tokio::spawn(async move {
                let (mut r, mut w) = origin.split();
                let flood = async {
                    let chunk = pattern(64 << 10, 3);
                    while w.write_all(&chunk).await.is_ok() {}
                };
                let mut sink = Vec::new();
                let drain = r.read_to_end(&mut sink);
                let ((), _) = tokio::join!(flood, drain);
            });
            let c = tokio::spawn(async move {
                let chunk = pattern(64 << 10, 4);
                while client.write_all(&chunk).await.is_ok() {}
            });
            let t0 = Instant::now();
            let (up, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                mode,
            )
            .await;
            assert_eq!(close, CloseReason::LimitExceeded, "{mode:?}");
            assert!(t0.elapsed() < Duration::from_secs(10), "{mode:?}");
            assert!(up + down <= 3 << 20, "{mode:?}");
            drop((proxy_client, proxy_up));
            o.await.unwrap();
            c.await.unwrap();
        }
    }

    #[tokio::test]
    async fn peeked_bytes_are_forwarded_first_and_exactly() {
        for mode in MODES {
            let first = b"\x16\x03\x01\x00\x05hello".to_vec();
            let up = pattern(1 << 20, 5);
            let o = run(
                Limits::default(),
                mode,
                &first,
                up.clone(),
                b"ok".to_vec(),
                false,
            )
            .await;
            let mut want = first.clone();
            want.extend_from_slice(&up);
            assert_eq!(o.close, CloseReason::Completed);
            assert!(o.at_origin == want, "{mode:?}: peeked bytes not first");
            assert_eq!(o.up, want.len() as u64);
            assert_eq!(o.at_client, b"ok");
        }
    }

    #[tokio::test]
    async fn a_limit_of_zero_passes_nothing() {
        for mode in MODES {
            let limits = Limits {
                bytes_per_connection: Some(0),
                ..Limits::default()
            };
            let o = run(
                limits.clone(),
                mode,
                b"",
                Vec::new(),
                pattern(70_000, 0),
                false,
            )
            .await;
            assert_eq!(o.close, CloseReason::LimitExceeded, "{mode:?}");
            assert!(o.at_client.is_empty() && o.down == 0 && o.session == 0);
            // Positive control: a tunnel that carries nothing completes.
            let o = run(limits, mode, b"", Vec::new(), Vec::new(), false).await;
            assert_eq!(o.close, CloseReason::Completed, "{mode:?}");
        }
    }

    #[tokio::test]
    async fn the_session_limit_spans_connections_under_splice() {
        let p = proxy(Limits {
            bytes_per_session: Some(1_000_003),
            ..Limits::default()
        });
        let mut total = 0;
        let mut closes = Vec::new();
        for _ in 0..3 {
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            let o = tokio::spawn(async move {
                let _ = origin.write_all(&pattern(600_000, 2)).await;
                let _ = origin.shutdown().await;
                let mut sink = Vec::new();
                let _ = origin.read_to_end(&mut sink).await;
            });
            let c = tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = client.read_to_end(&mut got).await;
                got.len()
            });
            let (_, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                Mode::SpliceAlways,
            )
            .await;
            drop((proxy_client, proxy_up));
            assert_eq!(c.await.unwrap() as u64, down);
            o.await.unwrap();
            total += down;
            closes.push(close);
        }
        assert_eq!(total, 1_000_003);
        assert_eq!(p.session_bytes(), 1_000_003);
        assert_eq!(
            closes,
            [
                CloseReason::Completed,
                CloseReason::LimitExceeded,
                CloseReason::LimitExceeded
            ]
        );
    }

    #[tokio::test]
    async fn half_close_works_in_both_directions_under_splice() {
        for mode in MODES {
            // The client closes its side first, then the origin answers.
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let p = proxy(Limits::default());
            let (_s, signal) = shutdown_channel();
            let o = tokio::spawn(async move {
                let mut req = Vec::new();
                origin.read_to_end(&mut req).await.unwrap();
                // Answer only after the client's EOF arrived.
                origin.write_all(&pattern(100_000, 4)).await.unwrap();
                origin.shutdown().await.unwrap();
                req
            });
            let c = tokio::spawn(async move {
                client.write_all(&pattern(50_000, 8)).await.unwrap();
                client.shutdown().await.unwrap();
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            });
            let (up, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop((proxy_client, proxy_up));
            assert_eq!(close, CloseReason::Completed, "{mode:?}");
            assert!(o.await.unwrap() == pattern(50_000, 8));
            assert!(c.await.unwrap() == pattern(100_000, 4));
            assert_eq!((up, down), (50_000, 100_000));

            // The origin closes first, then the client keeps sending.
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            let o = tokio::spawn(async move {
                origin.write_all(&pattern(90_000, 6)).await.unwrap();
                origin.shutdown().await.unwrap();
                let mut req = Vec::new();
                origin.read_to_end(&mut req).await.unwrap();
                req
            });
            let c = tokio::spawn(async move {
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                // Send only after the origin's EOF arrived.
                client.write_all(&pattern(70_000, 1)).await.unwrap();
                client.shutdown().await.unwrap();
                got
            });
            let (up, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop((proxy_client, proxy_up));
            assert_eq!(close, CloseReason::Completed, "{mode:?}");
            assert!(c.await.unwrap() == pattern(90_000, 6));
            assert!(o.await.unwrap() == pattern(70_000, 1));
            assert_eq!((up, down), (70_000, 90_000));
        }
    }

    #[tokio::test]
    async fn a_spliced_tunnel_idles_out() {
        for mode in MODES {
            let p = proxy(Limits {
                idle_timeout: Duration::from_millis(300),
                ..Limits::default()
            });
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            // Bulk first (so an adaptive direction is splicing), then silence.
            let o = tokio::spawn(async move {
                origin.write_all(&pattern(200_000, 1)).await.unwrap();
                let mut b = [0u8; 16];
                let _ = origin.read(&mut b).await;
            });
            let c = tokio::spawn(async move {
                let mut got = vec![0u8; 200_000];
                client.read_exact(&mut got).await.unwrap();
                let mut b = [0u8; 16];
                let _ = client.read(&mut b).await;
            });
            let t0 = Instant::now();
            let (_, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop((proxy_client, proxy_up));
            assert_eq!(close, CloseReason::IdleTimeout, "{mode:?}");
            assert_eq!(down, 200_000);
            assert!(t0.elapsed() >= Duration::from_millis(300));
            o.await.unwrap();
            c.await.unwrap();

            // Positive control: a tunnel that keeps talking more slowly than
            // the timeout but never pauses for it does not idle out.
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            let o = tokio::spawn(async move {
                for _ in 0..6 {
                    origin.write_all(&pattern(20_000, 1)).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                origin.shutdown().await.unwrap();
                let mut sink = Vec::new();
                let _ = origin.read_to_end(&mut sink).await;
            });
            let c = tokio::spawn(async move {
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got.len()
            });
            let (_, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, true),
                b"",
                &p.inner,
                signal,
                mode,
            )
            .await;
            drop((proxy_client, proxy_up));
            // 600 ms of traffic, never 300 ms of silence: it completes
            // (the client closes after the origin's end of stream).
            assert_eq!(close, CloseReason::Completed, "{mode:?}");
            assert_eq!(down, 120_000);
            assert_eq!(c.await.unwrap(), 120_000);
            o.await.unwrap();
        }
    }

    #[tokio::test]
    async fn near_sockets_get_small_fixed_buffers_once_bulk_far_ones_keep_autotuning() {
        use nix::sys::socket::{getsockopt, sockopt};
        for near in [true, false] {
            let p = proxy(Limits::default());
            let (mut origin, mut proxy_up) = tcp_pair().await;
            let (mut client, mut proxy_client) = tcp_pair().await;
            let (_s, signal) = shutdown_channel();
            let o = tokio::spawn(async move {
                origin.write_all(&pattern(4 << 20, 1)).await.unwrap();
                origin.shutdown().await.unwrap();
                let mut sink = Vec::new();
                let _ = origin.read_to_end(&mut sink).await;
            });
            let c = tokio::spawn(async move {
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            });
            let (_, down, close) = pump_with(
                &mut proxy_client,
                (&mut proxy_up, near),
                b"",
                &p.inner,
                signal,
                Mode::Adaptive,
            )
            .await;
            assert_eq!((down, close), (4 << 20, CloseReason::Completed));
            let rcv = getsockopt(&proxy_up, sockopt::RcvBuf).unwrap();
            // The kernel doubles what was asked for.
            assert_eq!(
                rcv == 2 * NEAR_BUF,
                near,
                "upstream near={near}: SO_RCVBUF {rcv}"
            );
            // The client is on loopback: near either way.
            let snd = getsockopt(&proxy_client, sockopt::SndBuf).unwrap();
            assert_eq!(snd, 2 * NEAR_BUF);
            drop((proxy_client, proxy_up));
            assert!(c.await.unwrap() == pattern(4 << 20, 1));
            o.await.unwrap();
        }
    }

    #[tokio::test]
    async fn shutdown_cuts_a_spliced_tunnel() {
        let p = proxy(Limits::default());
        let (mut origin, mut proxy_up) = tcp_pair().await;
        let (mut client, mut proxy_client) = tcp_pair().await;
        let (shutdown, signal) = shutdown_channel();
        let o = tokio::spawn(async move {
            origin.write_all(&pattern(100_000, 1)).await.unwrap();
            let mut b = [0u8; 16];
            let _ = origin.read(&mut b).await;
        });
        let c = tokio::spawn(async move {
            let mut got = vec![0u8; 100_000];
            client.read_exact(&mut got).await.unwrap();
            shutdown.trigger();
            let mut b = [0u8; 16];
            let _ = client.read(&mut b).await;
        });
        let (_, down, close) = pump_with(
            &mut proxy_client,
            (&mut proxy_up, true),
            b"",
            &p.inner,
            signal,
            Mode::SpliceAlways,
        )
        .await;
        drop((proxy_client, proxy_up));
        assert_eq!((down, close), (100_000, CloseReason::Shutdown));
        o.await.unwrap();
        c.await.unwrap();
    }
}
