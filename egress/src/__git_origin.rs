//! A loopback git origin for tests: not part of the public API, no semver
//! guarantee (only with `cfg(fuzzing)` or the `testing` feature).
//!
//! [`GitOrigin::start`] serves the bare repositories under a temporary
//! directory over HTTPS on `127.0.0.1:0`, through the real
//! `git http-backend` CGI (found via `git --exec-path`), with a certificate
//! from a fresh rcgen CA ([`GitOrigin::ca_pem`], for `--relay-ca`, or
//! [`GitOrigin::roots`]). Request bodies are streamed into the CGI's stdin
//! as they arrive and its stdout back, so a request cut short (a relay
//! dropping the connection before a pack's trailer) reaches the CGI as a
//! truncated body and changes nothing. Every request is remembered (method,
//! path, query and the `authorization` header it carried, never printed:
//! [`SeenRequest`]'s `Debug` redacts it).
//!
//! The origin owns its runtime on a thread of its own, so it works from a
//! plain `#[test]` as well as from inside a tokio runtime; dropping it stops
//! the server and removes the repositories.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

/// The names the default certificate is valid for.
pub const DEFAULT_NAMES: [&str; 4] = ["localhost", "127.0.0.1", "git.test", "github.com"];

/// Largest CGI response head read (bytes).
const MAX_CGI_HEAD: usize = 64 * 1024;

/// One request the origin received.
#[derive(Clone, PartialEq, Eq)]
pub struct SeenRequest {
    /// `GET`, `POST`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, if any.
    pub query: Option<String>,
    /// The `authorization` header, as received (tests compare it; never
    /// print it).
    pub authorization: Option<String>,
    /// The `git-protocol` header, as received.
    pub git_protocol: Option<String>,
    /// Request body bytes the CGI was given.
    pub body_bytes: u64,
    /// Whether the request body ended cleanly (false: cut short, or not
    /// ended yet).
    pub body_complete: bool,
    /// Whether the request body stopped (ended or was cut).
    pub body_ended: bool,
    /// The CGI's exit code once it ended (`Some(-1)`: killed by a signal);
    /// it runs to its end even when the client went away.
    pub cgi_exit: Option<i32>,
}

impl fmt::Debug for SeenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeenRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("git_protocol", &self.git_protocol)
            .field("body_bytes", &self.body_bytes)
            .field("body_complete", &self.body_complete)
            .field("body_ended", &self.body_ended)
            .field("cgi_exit", &self.cgi_exit)
            .finish()
    }
}

#[derive(Debug, Default)]
struct State {
    seen: Mutex<Vec<SeenRequest>>,
    stderr: Mutex<Vec<u8>>,
}

impl State {
    fn push(&self, r: SeenRequest) -> usize {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.push(r);
        seen.len() - 1
    }

    fn exited(&self, index: usize, code: i32) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = seen.get_mut(index) {
            r.cgi_exit = Some(code);
        }
    }

    fn finish_body(&self, index: usize, bytes: u64, complete: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = seen.get_mut(index) {
            r.body_bytes = bytes;
            r.body_complete = complete;
            r.body_ended = true;
        }
    }
}

/// A running git origin (see the module documentation).
pub struct GitOrigin {
    /// Where it listens (`127.0.0.1:port`).
    pub addr: SocketAddr,
    /// The CA certificate (PEM) that signed the origin's certificate.
    pub ca_pem: String,
    /// The CA certificate (DER).
    pub ca_der: CertificateDer<'static>,
    /// The project root: bare repositories live under it.
    pub root: PathBuf,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl fmt::Debug for GitOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitOrigin")
            .field("addr", &self.addr)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

fn other(e: impl fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// A `git` command isolated from the host's and user's configuration.
fn git() -> std::process::Command {
    let mut c = std::process::Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "origin")
        .env("GIT_AUTHOR_EMAIL", "origin@example.invalid")
        .env("GIT_COMMITTER_NAME", "origin")
        .env("GIT_COMMITTER_EMAIL", "origin@example.invalid")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    c
}

fn run(mut c: std::process::Command) -> io::Result<String> {
    let out = c.output()?;
    if !out.status.success() {
        return Err(other(format!(
            "{:?} failed: {}",
            c.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl GitOrigin {
    /// Start an origin whose certificate names [`DEFAULT_NAMES`].
    pub fn start() -> io::Result<Self> {
        Self::start_for(&DEFAULT_NAMES)
    }

    /// Start an origin whose certificate names `names` (DNS names or IP
    /// addresses).
    pub fn start_for(names: &[&str]) -> io::Result<Self> {
        let exec_path = {
            let mut c = git();
            c.arg("--exec-path");
            PathBuf::from(run(c)?)
        };
        let backend = exec_path.join("git-http-backend");
        if !backend.exists() {
            return Err(other(format!("{} not found", backend.display())));
        }
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("repos");
        std::fs::create_dir_all(&root)?;
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home)?;

        // the CA and the origin's certificate
        let ca_key = rcgen::KeyPair::generate().map_err(other)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(other)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "palisade test git origin CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(other)?;
        let leaf_key = rcgen::KeyPair::generate().map_err(other)?;
        let leaf_params = rcgen::CertificateParams::new(
            names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        )
        .map_err(other)?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca).map_err(other)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(other)?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
        .map_err(other)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let state = Arc::new(State::default());
        let (shutdown, mut stop) = oneshot::channel::<()>();
        let cgi = Arc::new(Cgi {
            backend,
            root: root.clone(),
            home,
        });
        let served = state.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("git-origin".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let mut conns = tokio::task::JoinSet::new();
                    loop {
                        let accepted = tokio::select! {
                            _ = &mut stop => break,
                            a = listener.accept() => a,
                        };
                        let Ok((tcp, _)) = accepted else { continue };
                        let acceptor = acceptor.clone();
                        let state = served.clone();
                        let cgi = cgi.clone();
                        conns.spawn(async move {
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let svc = hyper::service::service_fn(move |req| {
                                let state = state.clone();
                                let cgi = cgi.clone();
                                async move { Ok::<_, Infallible>(cgi.serve(req, &state).await) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(tls), svc)
                                .await;
                        });
                    }
                    conns.abort_all();
                });
            })?;
        Ok(Self {
            addr,
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            root,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
            _dir: dir,
        })
    }

    /// The origin's URL for `host` (one of the certificate's names, which
    /// the client must resolve to `127.0.0.1`): `https://host:port`.
    pub fn url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.addr.port())
    }

    /// A root store holding only the origin's CA.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        // a certificate rcgen just made always parses
        let _ = roots.add(self.ca_der.clone());
        roots
    }

    /// Create the bare repository `name` (e.g. `owner/repo.git`) under the
    /// root, with `http.receivepack true`; its path.
    pub fn create_bare(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.root.join(name);
        std::fs::create_dir_all(&path)?;
        let mut c = git();
        c.args(["init", "--bare", "--quiet", "--initial-branch=main"])
            .arg(&path);
        run(c)?;
        let mut c = git();
        c.arg("-C")
            .arg(&path)
            .args(["config", "http.receivepack", "true"]);
        run(c)?;
        Ok(path)
    }

    /// Give the bare repository `repo` a commit on `branch` (its parent
    /// the branch's current commit, if any) holding `file` with `contents`,
    /// pushed directly on disk (not through the server); the new commit id.
    pub fn commit(
        &self,
        repo: &str,
        branch: &str,
        file: &str,
        contents: &str,
    ) -> io::Result<String> {
        let bare = self.root.join(repo);
        let work = tempfile::tempdir()?;
        let w = work.path();
        let mut c = git();
        c.args(["init", "--quiet"]).arg(w);
        run(c)?;
        let at = |args: &[&str]| {
            let mut c = git();
            c.arg("-C").arg(w).args(args);
            c
        };
        if let Some(parent) = self.rev_parse(repo, &format!("refs/heads/{branch}")) {
            let mut c = at(&["fetch", "--quiet"]);
            c.arg(&bare).arg(format!("refs/heads/{branch}"));
            run(c)?;
            run(at(&["reset", "--quiet", "--hard", &parent]))?;
        }
        let target = w.join(file);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&target, contents)?;
        run(at(&["add", "--all"]))?;
        run(at(&["commit", "--quiet", "--allow-empty", "-m", file]))?;
        let mut c = at(&["push", "--quiet", "--force"]);
        c.arg(&bare).arg(format!("HEAD:refs/heads/{branch}"));
        run(c)?;
        run(at(&["rev-parse", "HEAD"]))
    }

    /// What `ref` names in the bare repository `repo` (`git rev-parse
    /// --verify`), `None` when it does not exist.
    pub fn rev_parse(&self, repo: &str, r: &str) -> Option<String> {
        let mut c = git();
        c.arg("-C")
            .arg(self.root.join(repo))
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{r}^{{commit}}"));
        run(c).ok().filter(|s| !s.is_empty())
    }

    /// How many requests had a path ending with `path_suffix`.
    pub fn requests(&self, path_suffix: &str) -> usize {
        self.seen()
            .iter()
            .filter(|r| r.path.ends_with(path_suffix))
            .count()
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.state
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The `authorization` header of each request whose path ends with
    /// `path_suffix`, in order.
    pub fn authorizations(&self, path_suffix: &str) -> Vec<Option<String>> {
        self.seen()
            .into_iter()
            .filter(|r| r.path.ends_with(path_suffix))
            .map(|r| r.authorization)
            .collect()
    }

    /// Waits (up to `timeout`) until every CGI started so far has ended;
    /// whether they all did. A check of the repositories after this sees
    /// whatever a cut request could still have applied.
    pub fn settle(&self, timeout: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            if self.seen().iter().all(|r| r.cgi_exit.is_some()) {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// What the CGIs wrote to stderr so far (bounded), for diagnostics.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(
            &self
                .state
                .stderr
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
        .into_owned()
    }
}

impl Drop for GitOrigin {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug)]
struct Cgi {
    backend: PathBuf,
    root: PathBuf,
    home: PathBuf,
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, io::Error>;

fn plain(status: StatusCode, text: &str) -> Response<OriginBody> {
    let mut resp = Response::new(
        http_body_util::Full::new(Bytes::from(text.to_owned()))
            .map_err(|e| match e {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp
}

/// A body fed by a channel of chunks (the CGI's stdout).
struct ChannelBody(mpsc::Receiver<io::Result<Bytes>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

impl Cgi {
    /// Runs the CGI on a task of its own: a client that goes away (a
    /// relay cutting a push) does not stop it, so the CGI gets every byte
    /// that arrived and runs to its end, as a real server's would (the
    /// worst case for a relay that must cut a push before it can apply).
    async fn serve(
        self: &Arc<Self>,
        req: Request<Incoming>,
        state: &Arc<State>,
    ) -> Response<OriginBody> {
        let this = Arc::clone(self);
        let state = Arc::clone(state);
        let run = tokio::spawn(async move { this.run(req, &state).await });
        match run.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("origin: {e}\n")),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("origin: {e}\n")),
        }
    }

    async fn run(
        &self,
        req: Request<Incoming>,
        state: &Arc<State>,
    ) -> io::Result<Response<OriginBody>> {
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let path = req.uri().path().to_owned();
        let query = req.uri().query().map(str::to_owned);
        let index = state.push(SeenRequest {
            method: req.method().to_string(),
            path: path.clone(),
            query: query.clone(),
            authorization: header("authorization"),
            git_protocol: header("git-protocol"),
            body_bytes: 0,
            body_complete: false,
            body_ended: false,
            cgi_exit: None,
        });
        let mut cmd = tokio::process::Command::new(&self.backend);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .env("REQUEST_METHOD", req.method().as_str())
            .env("PATH_INFO", &path)
            .env("QUERY_STRING", query.as_deref().unwrap_or(""))
            .env("REMOTE_USER", "palisade-test")
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, var) in [
            ("content-type", "CONTENT_TYPE"),
            ("content-length", "CONTENT_LENGTH"),
            ("content-encoding", "HTTP_CONTENT_ENCODING"),
            ("git-protocol", "HTTP_GIT_PROTOCOL"),
        ] {
            if let Some(v) = header(name) {
                cmd.env(var, v);
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                state.exited(index, -1);
                return Err(e);
            }
        };
        let mut stdin = child.stdin.take().ok_or_else(|| other("no stdin"))?;
        let mut stdout = child.stdout.take().ok_or_else(|| other("no stdout"))?;
        let mut stderr = child.stderr.take().ok_or_else(|| other("no stderr"))?;

        // request body → stdin, as it arrives; a cut body closes stdin early.
        // The body is read apart from the writes to stdin, so the end (or
        // cut) of the body is recorded when it happens, not once the CGI,
        // slowed by a loaded disk, has drained the pipe.
        let mut body = req.into_body();
        let feeder_state = state.clone();
        let (data_tx, mut data_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        tokio::spawn(async move {
            let mut n: u64 = 0;
            let complete = loop {
                match body.frame().await {
                    None => break true,
                    Some(Err(_)) => break false,
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            n = n.saturating_add(data.len() as u64);
                            if data_tx.send(data).is_err() {
                                break false;
                            }
                        }
                    }
                }
            };
            feeder_state.finish_body(index, n, complete);
            // stdin ends once what was received is written, as before:
            // a cut body gives the CGI a truncated stream
            drop(data_tx);
        });
        tokio::spawn(async move {
            while let Some(data) = data_rx.recv().await {
                if stdin.write_all(&data).await.is_err() {
                    break;
                }
            }
            drop(stdin);
        });
        let err_state = state.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(k) = stderr.read(&mut buf).await {
                let Some(chunk) = buf.get(..k).filter(|c| !c.is_empty()) else {
                    break;
                };
                let mut log = err_state
                    .stderr
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if log.len() < MAX_CGI_HEAD {
                    log.extend_from_slice(chunk);
                }
            }
        });

        // the CGI head
        let mut head = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let found = loop {
            if let Some(i) = find(&head, b"\r\n\r\n") {
                break Ok((i, 4));
            }
            if let Some(i) = find(&head, b"\n\n") {
                break Ok((i, 2));
            }
            if head.len() > MAX_CGI_HEAD {
                break Err(other("CGI head too large"));
            }
            match stdout.read(&mut buf).await {
                Ok(0) => {
                    break Err(other(format!(
                        "CGI ended before its head: {}",
                        String::from_utf8_lossy(&head)
                    )));
                }
                Ok(k) => head.extend_from_slice(buf.get(..k).unwrap_or_default()),
                Err(e) => break Err(e),
            }
        };
        let (end, sep) = match found {
            Ok(at) => at,
            Err(e) => {
                drop(stdout);
                let _ = child.start_kill();
                let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(-1);
                state.exited(index, code);
                return Err(e);
            }
        };
        let rest = Bytes::copy_from_slice(head.get(end + sep..).unwrap_or_default());
        let text = String::from_utf8_lossy(head.get(..end).unwrap_or_default()).into_owned();
        let mut resp = Response::builder().status(StatusCode::OK);
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("status") {
                let code = value
                    .split(' ')
                    .next()
                    .and_then(|c| c.parse::<u16>().ok())
                    .and_then(|c| StatusCode::from_u16(c).ok())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                resp = resp.status(code);
            } else if !name.eq_ignore_ascii_case("content-length") {
                resp = resp.header(name.trim(), value);
            }
        }

        // the rest of stdout → the response body, as the CGI writes it
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
        let exit_state = state.clone();
        tokio::spawn(async move {
            // a client gone away stops the sending, never the CGI: its
            // output is read to the end either way
            let mut listening = rest.is_empty() || tx.send(Ok(rest)).await.is_ok();
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(k) => {
                        let chunk = Bytes::copy_from_slice(buf.get(..k).unwrap_or_default());
                        if listening && tx.send(Ok(chunk)).await.is_err() {
                            listening = false;
                        }
                    }
                    Err(e) => {
                        if listening {
                            let _ = tx.send(Err(e)).await;
                        }
                        break;
                    }
                }
            }
            drop(tx);
            let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(-1);
            exit_state.exited(index, code);
        });
        resp.body(ChannelBody(rx).boxed()).map_err(other)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
