//! Every file a command reads is bounded and must be a regular file:
//! `/dev/zero`, a FIFO without a writer, a FIFO with a writer that never
//! stops, a directory and an over-limit regular file each give a clear
//! error naming the file, its kind and the limit, quickly (each run is
//! killed and the test fails after 10 s), and the same command with a valid
//! file works. `journal verify` and `report` give one verdict for the same
//! malformed journal.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const POLICY: &str = r#"
[worker]
cwd = "/w"
[egress]
allow = ["api.github.com:443", "*.example.com"]
"#;

/// The upper bound on one run; a refusal takes milliseconds.
const HANG_GUARD: Duration = Duration::from_secs(10);

/// Runs the binary in `dir`, killing it and failing after [`HANG_GUARD`].
fn palisade(dir: &Path, args: &[String]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "palisade {args:?} hung for {HANG_GUARD:?} (killed); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A valid set of inputs: policy, key, closed journal, anchor, session,
/// marks, event and workflow.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("palisade.toml"), POLICY).unwrap();
        std::fs::write(d.join("session.json"), "[]").unwrap();
        std::fs::write(d.join("marks"), "# marks\n/w/inbox\n").unwrap();
        std::fs::copy(data("slack-event.json"), d.join("event.json")).unwrap();
        let out = palisade(d, &args(&["journal", "keygen", "--out", "key"]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let out = palisade(
            d,
            &args(&[
                "journal",
                "append",
                "j.jsonl",
                "--key",
                "key",
                "--kind",
                "note",
                "--body",
                r#"{"n":1}"#,
                "--close",
            ]),
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        std::fs::write(d.join("anchor.json"), &out.stdout).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn data(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(f)
}

fn workflow_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policy/tests/vectors/v3")
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// A writer that keeps a FIFO full of zeros until dropped. It opens the
/// FIFO read-write and non-blocking, so it never waits for a reader and
/// stops as soon as it is told to.
struct EndlessWriter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EndlessWriter {
    fn start(path: &Path) -> Self {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let zeros = [0u8; 65536];
            while !flag.load(Ordering::Relaxed) {
                match f.write(&zeros) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => break,
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EndlessWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The hostile inputs.
#[derive(Clone, Copy, Debug)]
enum Bad {
    DevZero,
    FifoNoWriter,
    FifoEndless,
    Directory,
    /// A regular (sparse) file one byte over the limit.
    OverLimit(u64),
}

impl Bad {
    /// Creates the input under `dir`; the writer, if any, runs until dropped.
    fn make(self, dir: &Path, name: &str) -> (PathBuf, Option<EndlessWriter>) {
        let path = dir.join(name);
        match self {
            Self::DevZero => (PathBuf::from("/dev/zero"), None),
            Self::FifoNoWriter | Self::FifoEndless => {
                nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
                    .unwrap();
                let w = matches!(self, Self::FifoEndless).then(|| EndlessWriter::start(&path));
                (path, w)
            }
            Self::Directory => {
                std::fs::create_dir(&path).unwrap();
                (path, None)
            }
            Self::OverLimit(limit) => {
                let f = std::fs::File::create(&path).unwrap();
                f.set_len(limit + 1).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
                (path, None)
            }
        }
    }

    /// The stable code of the refusal.
    fn code(self) -> &'static str {
        match self {
            Self::OverLimit(_) => "input_too_large",
            _ => "input_not_regular",
        }
    }
}

/// One command reading one input of a kind.
struct Case {
    /// The kind as the error names it.
    kind: &'static str,
    /// The limit as the error writes it.
    limit: &'static str,
    /// The limit in bytes (for the over-limit file), `None` for journals.
    bytes: Option<u64>,
    /// The command line, with `{}` standing for the input.
    argv: Vec<String>,
    /// The exit status of a refusal.
    status: i32,
}

fn case(kind: &'static str, limit: &'static str, bytes: Option<u64>, argv: &[&str]) -> Case {
    let status = if argv[0] == "run" { 125 } else { 2 };
    Case {
        kind,
        limit,
        bytes,
        argv: args(argv),
        status,
    }
}

const MIB: u64 = 1 << 20;

fn cases(f: &Fixture) -> Vec<Case> {
    let root = workflow_root();
    let root = root.to_str().unwrap();
    let sock = f.path("relay.sock");
    let listen = format!("unix:{}", sock.display());
    let ph = f.path("placeholder");
    let ph = ph.to_str().unwrap();
    let decide = |flag: &str| {
        let mut a = vec![
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
            flag,
            "{}",
        ];
        if flag != "--policy" {
            a.extend(["--policy", "palisade.toml"]);
        }
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    vec![
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &refs(&decide("--policy")),
        ),
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &["check", "--policy", "{}"],
        ),
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &[
                "proxy",
                "--policy",
                "{}",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
            ],
        ),
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &["run", "--policy", "{}", "--", "/bin/true"],
        ),
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &[
                "relay",
                "--policy",
                "{}",
                "--name",
                "x",
                "--listen",
                &listen,
                "--placeholder-file",
                ph,
            ],
        ),
        case(
            "policy file",
            "1 MiB",
            Some(MIB),
            &["mark-untrusted", "--policy", "{}", "x"],
        ),
        case(
            "session file",
            "16 MiB",
            Some(16 * MIB),
            &refs(&decide("--session")),
        ),
        case("marks file", "1 MiB", Some(MIB), &refs(&decide("--marks"))),
        case(
            "marks file",
            "1 MiB",
            Some(MIB),
            &["mark-untrusted", "--marks", "{}", "x"],
        ),
        case(
            "marks file",
            "1 MiB",
            Some(MIB),
            &[
                "proxy",
                "--policy",
                "palisade.toml",
                "--marks",
                "{}",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
            ],
        ),
        case(
            "key file",
            "4 KiB",
            Some(4096),
            &["journal", "verify", "j.jsonl", "--key", "{}"],
        ),
        case(
            "key file",
            "4 KiB",
            Some(4096),
            &["report", "j.jsonl", "--key", "{}"],
        ),
        case(
            "anchor file",
            "4 KiB",
            Some(4096),
            &[
                "journal", "verify", "j.jsonl", "--key", "key", "--anchor", "{}",
            ],
        ),
        case(
            "anchor file",
            "4 KiB",
            Some(4096),
            &["report", "j.jsonl", "--key", "key", "--anchor", "{}"],
        ),
        case(
            "event file",
            "1 MiB",
            Some(MIB),
            &["explain", root, "--event", "{}"],
        ),
        case("journal", "1032 KiB", None, &["journal", "show", "{}"]),
        case(
            "journal",
            "1032 KiB",
            None,
            &["journal", "verify", "{}", "--key", "key"],
        ),
        case(
            "journal",
            "1032 KiB",
            None,
            &["report", "{}", "--key", "key"],
        ),
    ]
}

fn with_input(argv: &[String], input: &Path) -> Vec<String> {
    argv.iter()
        .map(|a| {
            if a == "{}" {
                input.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

#[test]
fn every_input_refuses_devices_fifos_directories_and_oversize_files() {
    let f = Fixture::new();
    let d = f.dir.path();
    let mut n = 0;
    for (i, c) in cases(&f).iter().enumerate() {
        let mut kinds = vec![
            Bad::DevZero,
            Bad::FifoNoWriter,
            Bad::FifoEndless,
            Bad::Directory,
        ];
        if let Some(limit) = c.bytes {
            kinds.push(Bad::OverLimit(limit));
        }
        for bad in kinds {
            let (input, writer) = bad.make(d, &format!("bad-{i}-{n}"));
            n += 1;
            let argv = with_input(&c.argv, &input);
            let out = palisade(d, &argv);
            drop(writer);
            let err = stderr(&out);
            let what = format!("{argv:?} on {bad:?}");
            assert_eq!(out.status.code(), Some(c.status), "{what}: {err}");
            assert!(err.contains(bad.code()), "{what}: {err}");
            assert!(
                err.contains(&format!("{} `{}`", c.kind, input.display())),
                "{what} does not name the kind and file: {err}"
            );
            assert!(
                err.contains(c.limit),
                "{what} does not name the limit: {err}"
            );
        }
    }
}

#[test]
fn the_same_commands_work_on_valid_inputs() {
    let f = Fixture::new();
    let d = f.dir.path();
    let ok = |argv: &[&str], status: i32| {
        let out = palisade(d, &args(argv));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(status), "{argv:?}: {err}");
        assert!(!err.contains("input_"), "{argv:?}: {err}");
        out
    };
    let decide = [
        "decide",
        "egress",
        "--policy",
        "palisade.toml",
        "--host",
        "a.example.com",
        "--port",
        "443",
    ];
    ok(&decide, 0);
    ok(
        &[
            &decide[..],
            &["--session", "session.json", "--marks", "marks"],
        ]
        .concat(),
        0,
    );
    ok(&["check", "--policy", "palisade.toml"], 0);
    ok(&["mark-untrusted", "--policy", "palisade.toml", "x"], 0);
    ok(&["mark-untrusted", "--marks", "marks", "y"], 0);
    ok(
        &[
            "journal",
            "verify",
            "j.jsonl",
            "--key",
            "key",
            "--anchor",
            "anchor.json",
        ],
        0,
    );
    ok(
        &[
            "report",
            "j.jsonl",
            "--key",
            "key",
            "--anchor",
            "anchor.json",
        ],
        0,
    );
    let shown = ok(&["journal", "show", "j.jsonl"], 0);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("note"));
    let root = workflow_root();
    ok(
        &["explain", root.to_str().unwrap(), "--event", "event.json"],
        0,
    );
    // proxy, run and relay read the same policy and get past it: each then
    // stops at its own, later check.
    let out = ok(
        &[
            "proxy",
            "--policy",
            "palisade.toml",
            "--listen",
            "nonsense",
            "--no-auth",
        ],
        2,
    );
    assert!(stderr(&out).contains("nonsense"), "{}", stderr(&out));
    let out = ok(
        &["run", "--policy", "palisade.toml", "--", "/bin/true"],
        125,
    );
    assert!(stderr(&out).contains("--journal"), "{}", stderr(&out));
    let out = ok(
        &[
            "relay",
            "--policy",
            "palisade.toml",
            "--name",
            "x",
            "--listen",
            "unix:r.sock",
            "--placeholder-file",
            "ph",
        ],
        2,
    );
    assert!(
        stderr(&out).contains("no [[egress.relay]] named `x`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_workflow_file_is_bounded_like_every_other_input() {
    let f = Fixture::new();
    let d = f.dir.path();
    for bad in [
        Bad::DevZero,
        Bad::FifoNoWriter,
        Bad::FifoEndless,
        Bad::OverLimit(4 * MIB),
    ] {
        let (input, writer) = bad.make(d, &format!("wf-{bad:?}"));
        let out = palisade(d, &args(&["check", input.to_str().unwrap()]));
        drop(writer);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(bad.code()), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("workflow file `{}`", input.display())),
            "{err}"
        );
        assert!(err.contains("4 MiB"), "{err}");
    }
    // A bundle whose files are each within the limit but too large together.
    let bundle = f.path("big");
    std::fs::create_dir_all(bundle.join(".paseo/workflows")).unwrap();
    for i in 0..5 {
        let file =
            std::fs::File::create(bundle.join(format!(".paseo/workflows/w{i}.yml"))).unwrap();
        file.set_len(4 * MIB).unwrap();
    }
    let out = palisade(d, &args(&["check", bundle.to_str().unwrap()]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "input_too_large: workflow bundle `{}`",
            bundle.join(".paseo").display()
        )),
        "{err}"
    );
    assert!(err.contains("16 MiB"), "{err}");
    // Positive control: the same command on a valid bundle reads it.
    let out = palisade(d, &args(&["check", workflow_root().to_str().unwrap()]));
    assert!(!stderr(&out).contains("input_"), "{}", stderr(&out));
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
}

/// `journal verify` and `report` on one file: (exit status, failure kind,
/// records verified) of each.
fn both_verdicts(dir: &Path, journal: &Path) -> [(Option<i32>, Option<String>, u64); 2] {
    let j = journal.to_str().unwrap();
    let verify = palisade(
        dir,
        &args(&["journal", "verify", j, "--key", "key", "--format", "json"]),
    );
    let report = palisade(
        dir,
        &args(&["report", j, "--key", "key", "--format", "json"]),
    );
    [verify, report].map(|out| {
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        let kind = v["failure"]["kind"].as_str().map(str::to_owned);
        (out.status.code(), kind, v["records"].as_u64().unwrap())
    })
}

#[test]
fn verify_and_report_give_one_verdict_on_the_same_file() {
    let f = Fixture::new();
    let d = f.dir.path();
    // A longer journal: journal_opened, three notes, journal_closed.
    let append = |extra: &[&str]| {
        let mut a = args(&[
            "journal",
            "append",
            "long.jsonl",
            "--key",
            "key",
            "--kind",
            "note",
            "--body",
            r#"{"n":2}"#,
        ]);
        a.extend(args(extra));
        let out = palisade(d, &a);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    append(&[]);
    append(&[]);
    append(&["--close"]);
    let valid = std::fs::read(f.path("long.jsonl")).unwrap();
    let lines: Vec<&[u8]> = valid
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 5);
    let join = |ls: &[&[u8]]| {
        let mut v = Vec::new();
        for l in ls {
            v.extend_from_slice(l);
            v.push(b'\n');
        }
        v
    };
    let long_line = vec![b'x'; 2 * MIB as usize];
    let mut overlong = join(&lines[..2]);
    overlong.extend_from_slice(&long_line);
    overlong.push(b'\n');
    let mut torn = join(&lines[..4]);
    torn.extend_from_slice(&lines[4][..lines[4].len() / 2]);
    let garbage = join(&[lines[0], lines[1], b"garbage", lines[3], lines[4]]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("no newline, 2 MiB", long_line.clone(), "malformed"),
        ("over-long line after records", overlong, "malformed"),
        ("torn tail after records", torn, "torn_tail"),
        ("garbage in the middle", garbage, "malformed"),
    ];
    for (name, bytes, kind) in cases {
        let path = f.path("case.jsonl");
        std::fs::write(&path, &bytes).unwrap();
        let [v, r] = both_verdicts(d, &path);
        assert_eq!(v, r, "{name}: journal verify and report disagree");
        assert_eq!(v.0, Some(1), "{name}");
        assert_eq!(v.1.as_deref(), Some(kind), "{name}");
    }
    // The 1 GiB file with no newline of the report: sparse, and refused
    // after reading about two chunks, by both.
    let path = f.path("huge.jsonl");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let [v, r] = both_verdicts(d, &path);
    assert_eq!(v, r, "1 GiB: journal verify and report disagree");
    assert_eq!(v.1.as_deref(), Some("malformed"));
    // `journal show` streams it too, and stops at the over-long line.
    let out = palisade(d, &args(&["journal", "show", "huge.jsonl"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("huge.jsonl:1: line longer than 1032 KiB"),
        "{}",
        stderr(&out)
    );
    // Positive control: the valid journal is verified and reported whole.
    let [v, r] = both_verdicts(d, &f.path("long.jsonl"));
    assert_eq!(v, (Some(0), None, 5));
    assert_eq!(r, v);
    let out = palisade(d, &args(&["report", "long.jsonl", "--key", "key"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("note: 3"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn run_reads_the_marks_file_next_to_the_policy_and_refuses_an_unreadable_one() {
    let f = Fixture::new();
    let d = f.dir.path();
    // The policy lives in its own folder; palisade runs from another one.
    let conf = f.path("conf");
    std::fs::create_dir_all(conf.join(".palisade")).unwrap();
    let policy = conf.join("palisade.toml");
    let work = f.path("work");
    std::fs::create_dir_all(&work).unwrap();
    // `run` refuses a `--cwd` other than the policy's `worker.cwd`.
    std::fs::write(
        &policy,
        POLICY.replace(
            "cwd = \"/w\"",
            &format!("cwd = {:?}", work.to_str().unwrap()),
        ),
    )
    .unwrap();
    let marks = conf.join(".palisade/untrusted");
    let run = |journal: &str| {
        palisade(
            d,
            &args(&[
                "run",
                "--cwd",
                work.to_str().unwrap(),
                "--policy",
                policy.to_str().unwrap(),
                "--journal",
                journal,
                "--key",
                "key",
                "--",
                "/bin/true",
            ]),
        )
    };
    // A FIFO planted where the marks file belongs: refused, never waited
    // on and never silently read as "no marks".
    let (_, writer) = Bad::FifoNoWriter.make(&conf.join(".palisade"), "untrusted");
    drop(writer);
    let out = run("j1.jsonl");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!(
            "input_not_regular: marks file `{}`",
            marks.display()
        )),
        "{err}"
    );
    // Positive control: a regular marks file there gets the run past it.
    std::fs::remove_file(&marks).unwrap();
    std::fs::write(&marks, "/w/inbox\n").unwrap();
    let out = run("j2.jsonl");
    assert!(!stderr(&out).contains("marks file"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_certificate_file_is_bounded_like_every_other_input() {
    let f = Fixture::new();
    let d = f.dir.path();
    std::fs::write(
        f.path("relay.toml"),
        r#"
[worker]
cwd = "/w"
[[egress.relay]]
name = "up"
origin = "https://up.example.com"
routes = ["POST /v1/x"]
credential = { header = "x-api-key", from_env = "PALISADE_INPUTS_TEST_CREDENTIAL" }
"#,
    )
    .unwrap();
    let credential: String = "laitnederc-ekaf".chars().rev().collect();
    let relay = |ca: &Path, listen: &str| {
        let argv = args(&[
            "relay",
            "--policy",
            "relay.toml",
            "--name",
            "up",
            "--listen",
            listen,
            "--placeholder-file",
            "ph",
            "--upstream-ca",
            ca.to_str().unwrap(),
        ]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
            .current_dir(d)
            .args(&argv)
            .env("PALISADE_INPUTS_TEST_CREDENTIAL", &credential)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > HANG_GUARD {
                let _ = child.kill();
                panic!("palisade {argv:?} hung for {HANG_GUARD:?} (killed)");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait_with_output().unwrap()
    };
    let listen = format!("unix:{}", f.path("r.sock").display());
    for bad in [
        Bad::DevZero,
        Bad::FifoNoWriter,
        Bad::FifoEndless,
        Bad::Directory,
        Bad::OverLimit(MIB),
    ] {
        let (input, writer) = bad.make(d, &format!("ca-{bad:?}"));
        let out = relay(&input, &listen);
        drop(writer);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(bad.code()), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("certificate file `{}`", input.display())),
            "{err}"
        );
        assert!(err.contains("1 MiB"), "{err}");
        assert!(!err.contains(&credential), "the credential leaked: {err}");
    }
    // Positive control: a valid PEM is read and the relay gets past it, to
    // the listen address it then refuses (TCP is not allowed).
    let ck = rcgen::generate_simple_self_signed(vec!["up.example.com".to_owned()]).unwrap();
    std::fs::write(f.path("ca.pem"), ck.cert.pem()).unwrap();
    let out = relay(&f.path("ca.pem"), "127.0.0.1:1");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("must be unix:PATH"), "{err}");
}

#[test]
fn journal_append_refuses_a_journal_that_is_not_a_regular_file() {
    let f = Fixture::new();
    let d = f.dir.path();
    let append = |journal: &Path| {
        palisade(
            d,
            &args(&[
                "journal",
                "append",
                journal.to_str().unwrap(),
                "--key",
                "key",
                "--kind",
                "note",
                "--body",
                "{}",
            ]),
        )
    };
    for bad in [Bad::FifoNoWriter, Bad::FifoEndless, Bad::Directory] {
        let (input, writer) = bad.make(d, &format!("append-{bad:?}"));
        let out = append(&input);
        drop(writer);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(&input.display().to_string()), "{bad:?}: {err}");
        if !matches!(bad, Bad::Directory) {
            assert!(err.contains("not a regular file"), "{bad:?}: {err}");
        }
    }
    // Positive control: an open journal takes the record.
    let out = append(&f.path("open.jsonl"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = append(&f.path("open.jsonl"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
