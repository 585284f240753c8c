//! The proxy suite: a local origin server, then bulk throughput through a
//! CONNECT tunnel, new-connection latency and many concurrent idle tunnels,
//! each for a direct connection, `palisade proxy`, the floor (a minimal
//! tokio relay, `palisade-egress`'s `floor` bench binary), tinyproxy and
//! squid.
//!
//! Everything stays on 127.0.0.1: the origin is a thread in this process,
//! the proxies get generated config files in a scratch directory and are
//! killed when the suite ends (no system service is touched).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::stats::{self, Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult, sys};

const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// The floor subject: the least a CONNECT relay on tokio does.
const FLOOR: &str = "floor";
const CHUNK: usize = 256 * 1024;

/// Sizes of one run of the suite.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    bulk_bytes: u64,
    bulk_runs: usize,
    latency_rounds: usize,
    latency_per_round: usize,
    idle_tunnels: usize,
    idle_runs: usize,
}

impl Sizes {
    fn new(ctx: &Ctx) -> Self {
        if ctx.opts.quick {
            Self {
                bulk_bytes: 16 << 20,
                bulk_runs: ctx.opts.runs,
                latency_rounds: ctx.opts.runs,
                latency_per_round: 40,
                idle_tunnels: 50,
                idle_runs: 2,
            }
        } else {
            let rounds = ctx.opts.runs.max(10);
            Self {
                bulk_bytes: 1 << 30,
                // The heavy cases run half as often, never fewer than 10.
                bulk_runs: (ctx.opts.runs / 2).max(10),
                latency_rounds: rounds,
                latency_per_round: 5000_usize.div_ceil(rounds),
                idle_tunnels: 1000,
                idle_runs: (ctx.opts.runs / 2).max(10),
            }
        }
    }
}

/// One way to reach the origin.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) name: String,
    /// The proxy to CONNECT through; `None` is the direct connection.
    proxy: Option<SocketAddr>,
    /// A `Proxy-Authorization` value to send, if the proxy wants one.
    auth: Option<String>,
    /// The `host:port` to CONNECT to (the origin, by a name when one is available).
    connect_to: String,
    /// The proxy process, for RSS and liveness.
    pub(crate) guard: Option<sys::Guard>,
    /// The proxy's RSS before its first idle run: memory a proxy keeps
    /// after tunnels close would hide the cost of the next run's tunnels
    /// if each run were measured from its own start.
    rss_baseline: Option<u64>,
    failed: Option<String>,
}

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let sizes = Sizes::new(ctx);
    let want_fds = u64::try_from(sizes.idle_tunnels * 4 + 512).unwrap_or(u64::MAX);
    sys::raise_nofile(want_fds)?;
    let (host, origin_ip) = origin_host();
    let origin = Origin::start(origin_ip)?;
    let dir = ctx.tmp.join("proxy");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // squid drops to its own user when started as root and must write here.
    set_mode(&dir, 0o777)?;

    let connect_to = format!("{host}:{}", origin.addr.port());
    let mut targets = vec![Target {
        name: "direct".to_owned(),
        proxy: None,
        auth: None,
        connect_to: connect_to.clone(),
        guard: None,
        rss_baseline: None,
        failed: None,
    }];
    match start_palisade(ctx, &dir, &connect_to, want_fds, "palisade proxy", &[]) {
        Ok(t) => targets.push(t),
        Err(e) => res.unavailable("palisade proxy", e),
    }
    match start_floor(ctx, &dir, want_fds) {
        Ok(mut t) => {
            t.connect_to.clone_from(&connect_to);
            targets.push(t);
        }
        Err(e) => res.unavailable(FLOOR, e),
    }
    for (name, start) in [
        ("tinyproxy", start_tinyproxy as StartFn),
        ("squid", start_squid as StartFn),
    ] {
        match Ctx::peer(name) {
            None => res.unavailable(name, format!("not installed (apt-get install {name})")),
            Some(bin) => match start(&bin, &dir, want_fds) {
                Ok(mut t) => {
                    t.connect_to.clone_from(&connect_to);
                    targets.push(t);
                }
                Err(e) => res.unavailable(name, e),
            },
        }
    }
    // Warm-up: every target must carry one echo round trip.
    for t in &mut targets {
        for _ in 0..ctx.opts.warmup.max(1) {
            if let Err(e) = echo_once(t, origin.addr) {
                t.failed = Some(format!("warm-up through {} failed: {e}", t.name));
                break;
            }
        }
    }

    bulk(&mut targets, origin.addr, sizes, &mut res);
    latency(&mut targets, origin.addr, sizes, &mut res);
    idle(&mut targets, origin.addr, sizes, &mut res);

    for t in &targets {
        if let Some(why) = &t.failed {
            res.unavailable(&t.name, why.clone());
        }
    }
    goals(&mut res, sizes);
    res.notes.push(format!(
        "Origin: a thread-per-connection TCP server in the harness on {origin_ip}, reached by the proxies as `{host}` (resolved by each proxy). Bulk: {} MiB downloaded through one tunnel per run, {} runs. \
         Latency: connect to the proxy, CONNECT, 200, one echoed byte, close; {} rounds × {} connections = {} per target. \
         Idle: {} tunnels held open at once (each proven live by an echo), {} runs; memory per tunnel is the proxy's VmRSS with all tunnels open minus its VmRSS before its first idle run, divided by the tunnel count. \
         Floor: `palisade-egress`'s `floor` bench binary, a tokio relay that reads the CONNECT head, resolves the name with `getaddrinfo`, dials, answers 200 and runs `copy_bidirectional` (no decisions, no records, no token). \
         Load generator, origin and proxy share the same {} cores.",
        sizes.bulk_bytes >> 20,
        sizes.bulk_runs,
        sizes.latency_rounds,
        sizes.latency_per_round,
        sizes.latency_rounds * sizes.latency_per_round,
        sizes.idle_tunnels,
        sizes.idle_runs,
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
    ));
    crate_figures(ctx, &mut res);
    drop(targets);
    origin.stop();
    Ok(res)
}

/// The name the proxies are asked to CONNECT to, and the loopback address
/// it resolves to (where the origin then listens). Host policies allow
/// names, not addresses, and refuse `localhost`, so the first of
/// `PALISADE_BENCH_ORIGIN_HOST` and this machine's host name that resolves
/// to exactly one IPv4 loopback address is used (Debian maps the host name
/// to 127.0.1.1); failing both, `localhost`, then the bare address. Every
/// proxy gets the same name, so each pays one lookup per connection.
pub(crate) fn origin_host() -> (String, Ipv4Addr) {
    let mut candidates = Vec::new();
    if let Ok(h) = std::env::var("PALISADE_BENCH_ORIGIN_HOST") {
        candidates.push(h);
    }
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        candidates.push(h.trim().to_owned());
    }
    candidates.push("localhost".to_owned());
    candidates
        .into_iter()
        .find_map(|h| loopback_of(&h).map(|ip| (h, ip)))
        .unwrap_or_else(|| ("127.0.0.1".to_owned(), Ipv4Addr::LOCALHOST))
}

/// The single IPv4 loopback address `host` resolves to, if that is all it
/// resolves to.
fn loopback_of(host: &str) -> Option<Ipv4Addr> {
    use std::net::ToSocketAddrs;
    if host.is_empty() {
        return None;
    }
    let addrs: Vec<SocketAddr> = (host, 0).to_socket_addrs().ok()?.collect();
    let mut ips = addrs.iter().map(SocketAddr::ip);
    let first = ips.next()?;
    match first {
        std::net::IpAddr::V4(v4) if v4.is_loopback() && ips.all(|ip| ip == first) => Some(v4),
        _ => None,
    }
}

type StartFn = fn(&Path, &Path, u64) -> Result<Target, String>;

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Starts `argv` with a raised open-file limit, logging to `log`.
pub(crate) fn spawn_logged(
    name: &str,
    argv: &[String],
    log: &Path,
    nofile: u64,
) -> Result<sys::Guard, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    // With util-linux `setpriv`, the proxy also dies if the harness is
    // killed before its guards run (squid clears this when it drops root).
    let mut cmd = match sys::which("setpriv") {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--", "/bin/sh"]);
            c
        }
        None => Command::new("/bin/sh"),
    };
    let child = cmd
        .arg("-c")
        .arg(format!("ulimit -n {nofile} 2>/dev/null; exec \"$@\""))
        .arg(name)
        .args(argv)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(sys::Guard {
        child,
        name: name.to_owned(),
    })
}

fn started(name: &str, mut guard: sys::Guard, port: u16, log: &Path) -> Result<Target, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    sys::wait_listening(&mut guard, addr, Duration::from_secs(30), log)?;
    Ok(Target {
        name: name.to_owned(),
        proxy: Some(addr),
        auth: None,
        connect_to: String::new(),
        guard: Some(guard),
        rss_baseline: None,
        failed: None,
    })
}

fn start_tinyproxy(bin: &Path, dir: &Path, nofile: u64) -> Result<Target, String> {
    let port = sys::free_port()?;
    let conf = dir.join("tinyproxy.conf");
    let log = dir.join("tinyproxy.log");
    let text = format!(
        "# Generated by cargo xtask bench: a plain CONNECT proxy on loopback.\n\
         Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients {}\nAllow 127.0.0.1\n\
         LogLevel Error\nLogFile \"{}\"\nPidFile \"{}\"\nDisableViaHeader Yes\n",
        nofile / 2,
        dir.join("tinyproxy.file.log").display(),
        dir.join("tinyproxy.pid").display()
    );
    std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
    let argv = [
        bin.display().to_string(),
        "-d".to_owned(),
        "-c".to_owned(),
        conf.display().to_string(),
    ];
    let guard = spawn_logged("tinyproxy", &argv, &log, nofile)?;
    started("tinyproxy", guard, port, &log)
}

fn start_squid(bin: &Path, dir: &Path, nofile: u64) -> Result<Target, String> {
    let port = sys::free_port()?;
    let conf = dir.join("squid.conf");
    let log = dir.join("squid.log");
    let text = format!(
        "# Generated by cargo xtask bench: a plain CONNECT proxy on loopback, no cache.\n\
         http_port 127.0.0.1:{port}\nhttp_access allow all\ncache deny all\ncache_mem 8 MB\n\
         access_log none\ncache_store_log none\ncache_log {}\npid_filename {}\ncoredump_dir {}\n\
         max_filedescriptors {nofile}\nshutdown_lifetime 0 seconds\n",
        dir.join("squid.cache.log").display(),
        dir.join("squid.pid").display(),
        dir.display()
    );
    std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
    let argv = [
        bin.display().to_string(),
        "-N".to_owned(),
        "-f".to_owned(),
        conf.display().to_string(),
    ];
    let guard = spawn_logged("squid", &argv, &log, nofile)?;
    started("squid", guard, port, &dir.join("squid.cache.log"))
}

/// The host policy the palisade proxy runs with: the origin allowed, the
/// loopback range let through the address deny set, byte and rate limits
/// off (absent), the concurrency limit above the idle-tunnel count. `PALISADE_BENCH_PROXY_POLICY` names a template to use
/// instead (`{origin}` and `{origin_port}` are replaced).
fn policy_text(connect_to: &str) -> Result<String, String> {
    let port = connect_to.rsplit_once(':').map_or("", |(_, p)| p);
    if let Some(path) = std::env::var_os("PALISADE_BENCH_PROXY_POLICY") {
        let t = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "PALISADE_BENCH_PROXY_POLICY {}: {e}",
                path.to_string_lossy()
            )
        })?;
        return Ok(t
            .replace("{origin}", connect_to)
            .replace("{origin_port}", port));
    }
    Ok(format!(
        "# Generated by cargo xtask bench: let the proxy reach the harness's origin on loopback.\n\
         [egress]\n\
         allow = [\"{connect_to}\"]\n\
         allow_addresses = [\"127.0.0.0/8\"]\n\
         # Byte and rate limits are off when absent; concurrent connections\n\
         # default to 256, fewer than the idle-tunnel case holds open.\n\
         limits = {{ connections = 65536 }}\n"
    ))
}

/// Starts the floor: `palisade-egress`'s `floor` bench binary, a minimal
/// CONNECT relay (`tokio::io::copy_bidirectional`, no decisions, no records).
fn start_floor(ctx: &Ctx, dir: &Path, nofile: u64) -> Result<Target, String> {
    let bench = ctx
        .crates
        .find("palisade-egress", "floor")
        .ok_or("palisade-egress has no floor bench binary in this build")?;
    let port = sys::free_port()?;
    let log = dir.join("floor.log");
    let argv = [
        bench.exe.display().to_string(),
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
    ];
    let guard = spawn_logged(FLOOR, &argv, &log, nofile)?;
    started(FLOOR, guard, port, &log)
}

/// Starts `palisade proxy` on a free loopback port with the generated
/// policy in `dir`, plus `extra` arguments (the ship suite's `--journal`,
/// `--key` and `--ship`), named `name` in the results.
pub(crate) fn start_palisade(
    ctx: &Ctx,
    dir: &Path,
    connect_to: &str,
    nofile: u64,
    name: &str,
    extra: &[String],
) -> Result<Target, String> {
    let bin = ctx.palisade_with("proxy", "egress")?;
    let policy = dir.join("palisade.toml");
    std::fs::write(&policy, policy_text(connect_to)?)
        .map_err(|e| format!("{}: {e}", policy.display()))?;
    let port = sys::free_port()?;
    let log = dir.join("palisade-proxy.log");
    // The per-session token, as a worker would present it: the proxy checks
    // it on every CONNECT. It never leaves this file and the request heads.
    let token_file = dir.join("palisade-proxy.token");
    let _ = std::fs::remove_file(&token_file);
    let mut argv = vec![
        bin.display().to_string(),
        "proxy".to_owned(),
        "--policy".to_owned(),
        policy.display().to_string(),
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
        "--token-file".to_owned(),
        token_file.display().to_string(),
    ];
    argv.extend_from_slice(extra);
    let guard = spawn_logged(name, &argv, &log, nofile)?;
    let mut t = started(name, guard, port, &log)?;
    let token = std::fs::read_to_string(&token_file)
        .map_err(|e| format!("palisade proxy wrote no token file: {e}"))?;
    t.auth = Some(format!("Bearer {}", token.trim()));
    t.connect_to = connect_to.to_owned();
    Ok(t)
}

/// Opens a connection to the origin through `t` (CONNECT when proxied).
fn open(t: &Target, origin: SocketAddr) -> Result<TcpStream, String> {
    let addr = t.proxy.unwrap_or(origin);
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    if t.proxy.is_some() {
        let auth = t
            .auth
            .as_ref()
            .map(|a| format!("Proxy-Authorization: {a}\r\n"))
            .unwrap_or_default();
        let to = &t.connect_to;
        let req = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n{auth}\r\n");
        s.write_all(req.as_bytes())
            .map_err(|e| format!("CONNECT: {e}"))?;
        let head = read_head(&mut s)?;
        let status = head.split_whitespace().nth(1).unwrap_or("");
        if status != "200" {
            return Err(format!(
                "CONNECT refused: {}",
                head.lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(120)
                    .collect::<String>()
            ));
        }
    }
    Ok(s)
}

/// Reads a response head; the origin sends nothing before we do, so
/// nothing past the head can arrive.
fn read_head(s: &mut TcpStream) -> Result<String, String> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("reading the CONNECT response: {e}"))?;
        if n == 0 {
            return Err("the proxy closed the connection before answering".to_owned());
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned();
            // A refusal may carry a body; only a tunnel must be clean.
            if end + 4 != buf.len() && head.split_whitespace().nth(1) == Some("200") {
                return Err("the proxy sent bytes past its 200 response head".to_owned());
            }
            return Ok(head);
        }
        if buf.len() > 16 * 1024 {
            return Err("CONNECT response head over 16 KiB".to_owned());
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One echoed byte on an open tunnel.
fn ping(s: &mut TcpStream, byte: u8) -> Result<(), String> {
    s.write_all(&[byte]).map_err(|e| format!("write: {e}"))?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).map_err(|e| format!("echo: {e}"))?;
    if b[0] == byte {
        Ok(())
    } else {
        Err("echo returned a different byte".to_owned())
    }
}

/// A new connection, one echo, close: the latency sample in µs.
pub(crate) fn echo_once(t: &Target, origin: SocketAddr) -> Result<f64, String> {
    let start = Instant::now();
    let mut s = open(t, origin)?;
    s.write_all(b"E").map_err(|e| format!("write: {e}"))?;
    ping(&mut s, b'x')?;
    let us = start.elapsed().as_secs_f64() * 1e6;
    drop(s);
    Ok(us)
}

fn bulk(targets: &mut [Target], origin: SocketAddr, sizes: Sizes, res: &mut SuiteResult) {
    let n = targets.len();
    let mut samples = vec![Vec::new(); n];
    let mut buf = vec![0u8; CHUNK];
    for round in 0..sizes.bulk_runs {
        for k in 0..n {
            let i = (round + k) % n;
            let (Some(t), Some(out)) = (targets.get_mut(i), samples.get_mut(i)) else {
                continue;
            };
            if t.failed.is_some() {
                continue;
            }
            match download(t, origin, sizes.bulk_bytes, &mut buf) {
                Ok(mbps) => out.push(mbps),
                Err(e) => t.failed = Some(format!("bulk: {e}")),
            }
        }
    }
    let case = format!("bulk throughput, {} MiB per tunnel", sizes.bulk_bytes >> 20);
    for (t, s) in targets.iter().zip(&samples) {
        if t.failed.is_none()
            && let Some(row) = Row::new(&case, &t.name, "MB/s", Better::Higher, s)
        {
            res.rows.push(row);
        }
    }
}

fn download(t: &Target, origin: SocketAddr, bytes: u64, buf: &mut [u8]) -> Result<f64, String> {
    let mut s = open(t, origin)?;
    let mut cmd = vec![b'D'];
    cmd.extend_from_slice(&bytes.to_le_bytes());
    let start = Instant::now();
    s.write_all(&cmd).map_err(|e| format!("write: {e}"))?;
    let mut got: u64 = 0;
    while got < bytes {
        let n = s
            .read(buf)
            .map_err(|e| format!("read after {got} bytes: {e}"))?;
        if n == 0 {
            return Err(format!("tunnel closed after {got} of {bytes} bytes"));
        }
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
    Ok(bytes as f64 / 1e6 / secs)
}

fn latency(targets: &mut [Target], origin: SocketAddr, sizes: Sizes, res: &mut SuiteResult) {
    let n = targets.len();
    let mut pooled = vec![Vec::new(); n];
    let mut per_round = vec![Vec::new(); n];
    for round in 0..sizes.latency_rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let (Some(t), Some(pool), Some(rounds)) =
                (targets.get_mut(i), pooled.get_mut(i), per_round.get_mut(i))
            else {
                continue;
            };
            if t.failed.is_some() {
                continue;
            }
            let mut this = Vec::with_capacity(sizes.latency_per_round);
            for _ in 0..sizes.latency_per_round {
                match echo_once(t, origin) {
                    Ok(us) => this.push(us),
                    Err(e) => {
                        t.failed = Some(format!("latency: {e}"));
                        break;
                    }
                }
            }
            if let Some(p50) = stats::quantile(&stats::sorted(&this), 0.5) {
                rounds.push(p50);
            }
            pool.extend(this);
        }
    }
    let case = "new connection + 1-byte echo, p50 per round";
    let direct_rounds = per_round.first().cloned().unwrap_or_default();
    let direct_p50 = pooled
        .first()
        .and_then(|p| stats::quantile(&stats::sorted(p), 0.5));
    for ((t, pool), rounds) in targets.iter().zip(&pooled).zip(&per_round) {
        if t.failed.is_some() {
            continue;
        }
        let sorted = stats::sorted(pool);
        if let Some(mut row) = Row::new(case, &t.name, "µs", Better::Lower, rounds) {
            for (label, q) in [("pooled_p50_us", 0.5), ("pooled_p99_us", 0.99)] {
                if let Some(v) = stats::quantile(&sorted, q) {
                    row.extra.push((label.to_owned(), v));
                }
            }
            row.extra
                .push(("connections".to_owned(), count(pool.len())));
            res.rows.push(row);
        }
        // Added latency: this target's round p50 minus the direct one's in
        // the same round.
        if t.proxy.is_some() && rounds.len() == direct_rounds.len() {
            let added: Vec<f64> = rounds
                .iter()
                .zip(&direct_rounds)
                .map(|(a, d)| a - d)
                .collect();
            if let Some(mut row) = Row::new(
                "added latency per new connection (p50 − direct p50)",
                &t.name,
                "µs",
                Better::Lower,
                &added,
            ) {
                if let (Some(p), Some(d)) = (stats::quantile(&sorted, 0.5), direct_p50) {
                    row.extra
                        .push(("pooled_p50_minus_direct_us".to_owned(), p - d));
                }
                res.rows.push(row);
            }
        }
    }
}

#[allow(clippy::cast_precision_loss, reason = "small counts")]
fn count(n: usize) -> f64 {
    n as f64
}

fn idle(targets: &mut [Target], origin: SocketAddr, sizes: Sizes, res: &mut SuiteResult) {
    let n = targets.len();
    let mut mem = vec![Vec::new(); n];
    let mut setup = vec![Vec::new(); n];
    for round in 0..sizes.idle_runs {
        for k in 0..n {
            let i = (round + k) % n;
            let (Some(t), Some(m), Some(su)) =
                (targets.get_mut(i), mem.get_mut(i), setup.get_mut(i))
            else {
                continue;
            };
            if t.failed.is_some() {
                continue;
            }
            match hold_idle(t, origin, sizes.idle_tunnels) {
                Ok((per_tunnel, open_ms)) => {
                    if let Some(b) = per_tunnel {
                        m.push(b / 1024.0);
                    }
                    su.push(open_ms);
                }
                Err(e) => t.failed = Some(format!("{} idle tunnels: {e}", sizes.idle_tunnels)),
            }
        }
    }
    let mem_case = format!("memory per idle tunnel, {} open", sizes.idle_tunnels);
    let open_case = format!("open {} concurrent tunnels", sizes.idle_tunnels);
    for ((t, m), su) in targets.iter().zip(&mem).zip(&setup) {
        if t.failed.is_some() {
            continue;
        }
        if let Some(row) = Row::new(&mem_case, &t.name, "KiB", Better::Lower, m) {
            res.rows.push(row);
        }
        if let Some(row) = Row::new(&open_case, &t.name, "ms", Better::Lower, su) {
            res.rows.push(row);
        }
    }
}

/// Opens `count` tunnels at once, proves each live, and returns the
/// proxy's RSS growth over its baseline per tunnel (bytes; `None` for
/// direct) and the time taken to open them all (ms).
fn hold_idle(
    t: &mut Target,
    origin: SocketAddr,
    count: usize,
) -> Result<(Option<f64>, f64), String> {
    if let Some(g) = t.guard.as_mut() {
        g.check_alive()?;
    }
    let pid = t.guard.as_ref().map(sys::Guard::pid);
    let now = pid.map(sys::rss_bytes).transpose()?;
    let before = *t.rss_baseline.get_or_insert_with(|| now.unwrap_or(0));
    let before = now.map(|_| before);
    let start = Instant::now();
    let mut open_streams = Vec::with_capacity(count);
    for k in 0..count {
        let mut s = open(t, origin).map_err(|e| format!("tunnel {k}: {e}"))?;
        s.write_all(b"E").map_err(|e| format!("tunnel {k}: {e}"))?;
        ping(&mut s, b'o').map_err(|e| format!("tunnel {k}: {e}"))?;
        open_streams.push(s);
    }
    let open_ms = start.elapsed().as_secs_f64() * 1000.0;
    std::thread::sleep(Duration::from_millis(200));
    let after = pid.map(sys::rss_bytes).transpose()?;
    // Every tunnel is still carrying bytes while all are open.
    for (k, s) in open_streams.iter_mut().enumerate() {
        ping(s, b'l').map_err(|e| format!("tunnel {k} died while {count} were open: {e}"))?;
    }
    for s in &open_streams {
        let _ = s.shutdown(Shutdown::Both);
    }
    drop(open_streams);
    // Let the proxy tear the tunnels down before the next subject runs.
    std::thread::sleep(Duration::from_millis(300));
    #[allow(clippy::cast_precision_loss, reason = "memory sizes far below 2^52")]
    let per = match (before, after) {
        (Some(b), Some(a)) => Some((a as f64 - b as f64) / count as f64),
        _ => None,
    };
    Ok((per, open_ms))
}

fn goals(res: &mut SuiteResult, sizes: Sizes) {
    let median = |case_prefix: &str, subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case.starts_with(case_prefix) && r.subject == subject)
            .map(|r| r.summary.median)
    };
    let mut goals = Vec::new();
    if let Some(p) = median("bulk throughput", "palisade proxy") {
        for (peer, cmp, target) in [
            ("direct", Cmp::Ge, 0.8),
            (FLOOR, Cmp::Ge, 0.9),
            ("tinyproxy", Cmp::Gt, 1.0),
            ("squid", Cmp::Gt, 1.0),
        ] {
            if let Some(b) = median("bulk throughput", peer)
                && b > 0.0
            {
                goals.push(GoalCheck {
                    what: format!(
                        "bulk throughput palisade proxy / {peer} ({} MiB)",
                        sizes.bulk_bytes >> 20
                    ),
                    value: p / b,
                    unit: "×".to_owned(),
                    cmp,
                    target,
                });
            }
        }
    }
    // The latency goals use the pooled p50s (all connections of the run),
    // which a stall of one round cannot move much: palisade's added latency
    // against the floor's and tinyproxy's.
    let pooled = |subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case.starts_with("new connection") && r.subject == subject)
            .and_then(|r| r.extra.iter().find(|(k, _)| k == "pooled_p50_us"))
            .map(|(_, v)| *v)
    };
    if let (Some(p), Some(d)) = (pooled("palisade proxy"), pooled("direct")) {
        for (peer, target) in [(FLOOR, 2.0), ("tinyproxy", 0.8)] {
            if let Some(q) = pooled(peer)
                && q - d > 0.0
            {
                goals.push(GoalCheck {
                    what: format!(
                        "added latency per new connection, pooled p50 − direct: palisade proxy / {peer}"
                    ),
                    value: (p - d) / (q - d),
                    unit: "×".to_owned(),
                    cmp: Cmp::Le,
                    target,
                });
            }
        }
    }
    res.goals.extend(goals);
}

fn crate_figures(ctx: &Ctx, res: &mut SuiteResult) {
    for b in ctx.crates.for_suite("proxy") {
        match ctx.crates.run(&b, "proxy") {
            Ok(figs) => super::journal::push_figures(res, &figs),
            Err(e) => res.unavailable(&format!("{} bench", b.package), e),
        }
    }
}

/// The origin: `E` then echo until EOF; `D` + u64 LE length then that many
/// bytes and close. One thread per connection (small stacks), so a thousand
/// idle tunnels cost it a thousand parked threads and nothing else.
#[derive(Debug)]
pub(crate) struct Origin {
    pub(crate) addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<()>,
}

impl Origin {
    pub(crate) fn start(ip: Ipv4Addr) -> Result<Self, String> {
        let listener = TcpListener::bind((ip, 0)).map_err(|e| format!("origin bind {ip}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let _ = std::thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || serve(conn));
            }
        });
        Ok(Self { addr, stop, handle })
    }

    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        let _ = self.handle.join();
    }
}

fn serve(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    let mut cmd = [0u8; 1];
    if s.read_exact(&mut cmd).is_err() {
        return;
    }
    match cmd[0] {
        b'E' => {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if s.write_all(buf.get(..n).unwrap_or_default()).is_err() {
                    break;
                }
            }
        }
        b'D' => {
            let mut len = [0u8; 8];
            if s.read_exact(&mut len).is_err() {
                return;
            }
            let mut left = u64::from_le_bytes(len);
            let buf = vec![0x5a_u8; CHUNK];
            while left > 0 {
                let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
                if s.write_all(buf.get(..n).unwrap_or_default()).is_err() {
                    return;
                }
                left -= n as u64;
            }
            let _ = s.shutdown(Shutdown::Write);
            let mut sink = [0u8; 64];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct() -> Target {
        Target {
            name: "direct".into(),
            proxy: None,
            auth: None,
            connect_to: "127.0.0.1:9".into(),
            guard: None,
            rss_baseline: None,
            failed: None,
        }
    }

    #[test]
    fn origin_echoes_and_streams() {
        let origin = Origin::start(Ipv4Addr::LOCALHOST).unwrap();
        let t = direct();
        assert!(echo_once(&t, origin.addr).unwrap() > 0.0);
        let mut buf = vec![0u8; CHUNK];
        assert!(download(&t, origin.addr, 3 * CHUNK as u64 + 7, &mut buf).unwrap() > 0.0);
        let (per, ms) = hold_idle(&mut direct(), origin.addr, 20).unwrap();
        assert!(per.is_none() && ms > 0.0);
        origin.stop();
    }

    /// A one-shot fake proxy that answers every CONNECT with `head`.
    fn fake_proxy(head: &'static [u8]) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 512];
            let _ = c.read(&mut buf).unwrap();
            c.write_all(head).unwrap();
        });
        (addr, h)
    }

    fn latency_row(subject: &str, pooled_p50: f64) -> Row {
        let mut r = Row::new(
            "new connection + 1-byte echo, p50 per round",
            subject,
            "µs",
            Better::Lower,
            &[pooled_p50],
        )
        .unwrap();
        r.extra.push(("pooled_p50_us".to_owned(), pooled_p50));
        r
    }

    fn bulk_row(subject: &str, mbps: f64) -> Row {
        Row::new(
            "bulk throughput, 16 MiB per tunnel",
            subject,
            "MB/s",
            Better::Higher,
            &[mbps],
        )
        .unwrap()
    }

    #[test]
    fn the_proxy_goals_are_relative_to_the_floor_and_tinyproxy() {
        let sizes = Sizes {
            bulk_bytes: 16 << 20,
            bulk_runs: 1,
            latency_rounds: 1,
            latency_per_round: 1,
            idle_tunnels: 1,
            idle_runs: 1,
        };
        let mut res = SuiteResult::default();
        // Added latency: palisade 120 µs, floor 50 µs, tinyproxy 160 µs.
        for (s, v) in [
            ("direct", 30.0),
            ("palisade proxy", 150.0),
            (FLOOR, 80.0),
            ("tinyproxy", 190.0),
        ] {
            res.rows.push(latency_row(s, v));
        }
        for (s, v) in [
            ("direct", 4000.0),
            ("palisade proxy", 3500.0),
            (FLOOR, 3000.0),
        ] {
            res.rows.push(bulk_row(s, v));
        }
        goals(&mut res, sizes);
        let goal = |what: &str| {
            res.goals
                .iter()
                .find(|g| g.what.contains(what))
                .unwrap_or_else(|| panic!("no goal {what}: {:?}", res.goals))
        };
        let floor = goal("direct: palisade proxy / floor");
        assert!(floor.what.starts_with("added latency"));
        assert!((floor.value - 120.0 / 50.0).abs() < 1e-9 && floor.target == 2.0);
        assert!(!floor.met(), "2.4× misses ≤ 2.0×");
        let tiny = goal("direct: palisade proxy / tinyproxy");
        assert!((tiny.value - 0.75).abs() < 1e-9 && tiny.met());
        let bulk = goal("bulk throughput palisade proxy / floor");
        assert!((bulk.value - 3500.0 / 3000.0).abs() < 1e-9 && bulk.target == 0.9);
        // The absolute 100 µs goal is gone.
        assert!(res.goals.iter().all(|g| g.unit != "µs"), "{:?}", res.goals);
    }

    #[test]
    fn the_origin_name_resolves_to_one_loopback_address() {
        let (host, ip) = origin_host();
        assert!(ip.is_loopback(), "{host} → {ip}");
        assert_eq!(loopback_of("127.0.0.1"), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(loopback_of(""), None);
        // Positive and negative: a non-loopback literal is not a candidate.
        assert_eq!(loopback_of("192.0.2.1"), None);
    }

    #[test]
    fn a_refused_connect_is_an_error_with_the_status_line() {
        let (addr, h) = fake_proxy(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno");
        let t = Target {
            proxy: Some(addr),
            ..direct()
        };
        let err = open(&t, "127.0.0.1:9".parse().unwrap()).unwrap_err();
        assert!(err.contains("403 Forbidden"), "{err}");
        h.join().unwrap();
        // Positive control: the same client through a proxy that says 200.
        let (addr, h) = fake_proxy(b"HTTP/1.1 200 Connection established\r\n\r\n");
        let t = Target {
            proxy: Some(addr),
            ..direct()
        };
        assert!(open(&t, "127.0.0.1:9".parse().unwrap()).is_ok());
        h.join().unwrap();
    }
}
