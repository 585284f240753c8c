//! The git wire parsers against real git 2.47: packs from `git
//! pack-objects` (offset and ref deltas, deltified commits, thin packs,
//! big files, SHA-256) scanned to exactly `git rev-list`'s commits and
//! parents, ancestry checked against `git merge-base --is-ancestor`, push
//! bodies captured from a real `git push` to a loopback smart-HTTP server
//! (run by `git receive-pack --stateless-rpc`), and a refusal served to a
//! real `git push`, which must print `! [remote rejected]` with the reason.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use palisade_egress::git::ObjectId;
use palisade_egress::git::pack::{Ancestry, PackScanner};
use palisade_egress::git::pktline::{PushHead, parse_push_head};
use palisade_egress::git::report::{RefStatus, ReportReader, refusal_body};
use proptest::prelude::*;

// ---- running git -----------------------------------------------------------

fn git_cmd(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "T")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "T")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000")
        .env("no_proxy", "*");
    cmd
}

fn run(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = git_cmd(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn git(dir: &Path, args: &[&str]) -> String {
    git_in(dir, args, b"")
}

fn git_in(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    let out = run(dir, args, stdin);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn oid(hex: &str) -> ObjectId {
    ObjectId::parse(hex).unwrap_or_else(|| panic!("an object id: {hex:?}"))
}

/// A work repository with a little history: `n` commits of a changing
/// file, on `main`.
fn repo(dir: &Path, format: &str) {
    git(
        dir,
        &[
            "init",
            "-q",
            "-b",
            "main",
            &format!("--object-format={format}"),
        ],
    );
}

fn commit(dir: &Path, file: &str, content: &[u8], message: &str) -> String {
    std::fs::write(dir.join(file), content).unwrap();
    git(dir, &["add", file]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// `git rev-list --parents` of `revs`: each commit and its parents.
fn rev_list(dir: &Path, revs: &[&str]) -> BTreeMap<ObjectId, Vec<ObjectId>> {
    let mut args = vec!["rev-list", "--parents"];
    args.extend_from_slice(revs);
    git(dir, &args)
        .lines()
        .map(|line| {
            let mut ids = line.split(' ').map(oid);
            (ids.next().unwrap(), ids.collect())
        })
        .collect()
}

fn scanned(format: &str, pack: &[u8], chunk: usize) -> PackScanner {
    let mut scanner = PackScanner::new(format);
    for piece in pack.chunks(chunk.max(1)) {
        scanner.feed(piece).expect("a real pack scans");
    }
    scanner.finish().expect("a real pack is complete");
    scanner
}

fn commits_of(scanner: &PackScanner) -> BTreeMap<ObjectId, Vec<ObjectId>> {
    scanner
        .commits()
        .map(|(id, p)| (id.clone(), p.to_vec()))
        .collect()
}

/// Writes a pack of `revs` with `opts` to a file and returns its bytes and
/// `git verify-pack -v` lines.
fn pack_file(dir: &Path, opts: &[&str], revs: &str) -> (Vec<u8>, String) {
    let mut args = vec!["pack-objects", "--revs", "-q"];
    args.extend_from_slice(opts);
    args.push("out/p");
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let hash = git_in(dir, &args, revs.as_bytes());
    let pack = dir.join(format!("out/p-{hash}.pack"));
    let idx = dir.join(format!("out/p-{hash}.idx"));
    let verify = git(dir, &["verify-pack", "-v", idx.to_str().unwrap()]);
    (std::fs::read(pack).unwrap(), verify)
}

/// Objects `verify-pack -v` lists as deltas of `kind`.
fn deltified(verify: &str, kind: &str) -> usize {
    verify
        .lines()
        .filter(|l| {
            let cols: Vec<_> = l.split_whitespace().collect();
            cols.len() == 7 && cols[1] == kind
        })
        .count()
}

/// A history whose commits carry long, nearly equal messages (so git
/// deltifies commits), a merge, a big random file and many small ones.
fn varied_history(dir: &Path, format: &str) -> Vec<String> {
    repo(dir, format);
    let long = "a commit message long enough to be worth a delta. ".repeat(80);
    let mut ids = Vec::new();
    let mut seed = 7u64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    for i in 0..12 {
        let content = format!("line {i}\n").repeat(50 + i);
        ids.push(commit(
            dir,
            &format!("f{}", i % 3),
            content.as_bytes(),
            &format!("{long}{i}"),
        ));
    }
    git(dir, &["checkout", "-q", "-b", "side", &ids[5]]);
    ids.push(commit(dir, "side", b"side\n", &format!("{long}side")));
    git(dir, &["checkout", "-q", "main"]);
    git(dir, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]);
    ids.push(git(dir, &["rev-parse", "HEAD"]));
    ids.push(commit(dir, "big", &random(3 << 20), &format!("{long}big")));
    ids
}

// ---- packs -------------------------------------------------------------------

#[test]
fn scanned_commits_are_exactly_rev_list_for_every_kind_of_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    varied_history(dir, "sha1");
    let want = rev_list(dir, &["main"]);
    let variants: [(&str, &[&str]); 4] = [
        ("ref deltas", &[]),
        ("offset deltas", &["--delta-base-offset"]),
        (
            "deep window",
            &["--delta-base-offset", "--window=250", "--depth=50"],
        ),
        ("big file threshold", &["--delta-base-offset"]),
    ];
    let mut commit_deltas = 0;
    for (what, opts) in variants {
        let mut args: Vec<&str> = Vec::new();
        if what == "big file threshold" {
            // Applied through config: blobs over 64 KiB stored whole.
            git(dir, &["config", "core.bigFileThreshold", "64k"]);
        }
        args.extend_from_slice(opts);
        let (pack, verify) = pack_file(dir, &args, "main\n");
        commit_deltas += deltified(&verify, "commit");
        for chunk in [pack.len(), 4096, 7] {
            let scanner = scanned("sha1", &pack, chunk);
            assert_eq!(commits_of(&scanner), want, "{what}, chunks of {chunk}");
        }
    }
    assert!(
        commit_deltas > 0,
        "git deltified some commits, so resolving commit deltas was tested"
    );
}

#[test]
fn a_thin_pack_scans_and_proves_what_it_carries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ids = varied_history(dir, "sha1");
    let old = &ids[3];
    let mut run_pack = git_cmd(dir)
        .args([
            "pack-objects",
            "--revs",
            "--thin",
            "--stdout",
            "-q",
            "--delta-base-offset",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    run_pack
        .stdin
        .take()
        .unwrap()
        .write_all(format!("main\n^{old}\n").as_bytes())
        .unwrap();
    let out = run_pack.wait_with_output().unwrap();
    assert!(out.status.success());
    let scanner = scanned("sha1", &out.stdout, 1000);
    let want = rev_list(dir, &["main", &format!("^{old}")]);
    assert!(want.len() >= 10);
    assert_eq!(commits_of(&scanner), want);
    let main = git(dir, &["rev-parse", "main"]);
    assert_eq!(
        scanner.fast_forward(&oid(old), &oid(&main)),
        Ancestry::FastForward
    );
    // The merge's side parent is in the pack; an id older than `old`
    // cannot be proven from this pack.
    assert_eq!(
        scanner.fast_forward(&oid(&ids[1]), &oid(&main)),
        Ancestry::Unproven
    );
    assert_eq!(
        scanner.fast_forward(&oid(&main), &oid(old)),
        Ancestry::Unproven
    );
}

#[test]
fn a_sha256_pack_scans_to_rev_list() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ids = varied_history(dir, "sha256");
    let (pack, _) = pack_file(dir, &["--delta-base-offset", "--window=50"], "main\n");
    let scanner = scanned("sha256", &pack, 5000);
    assert_eq!(scanner.trailer_len(), 32);
    assert_eq!(commits_of(&scanner), rev_list(dir, &["main"]));
    let main = git(dir, &["rev-parse", "main"]);
    assert_eq!(main.len(), 64);
    assert_eq!(
        scanner.fast_forward(&oid(&ids[0]), &oid(&main)),
        Ancestry::FastForward
    );
    // Read as SHA-1, the same bytes are not a pack (its trailer is longer).
    let mut as_sha1 = PackScanner::new("sha1");
    let r = as_sha1.feed(&pack).and_then(|()| as_sha1.finish());
    assert!(r.is_err());
}

/// A random history of `n` commits made with `git commit-tree`: commit `i`
/// has up to two parents among the earlier ones, as `picks` say.
fn random_dag(dir: &Path, picks: &[(u8, u8, u8)]) -> Vec<String> {
    repo(dir, "sha1");
    let tree = git(dir, &["write-tree"]);
    let mut ids: Vec<String> = Vec::new();
    for (i, &(count, a, b)) in picks.iter().enumerate() {
        let mut args = vec![
            "commit-tree".to_owned(),
            tree.clone(),
            "-m".into(),
            format!("c{i}"),
        ];
        if i > 0 {
            let mut parents = BTreeSet::new();
            for p in [a, b].iter().take(usize::from(count % 3)) {
                parents.insert(usize::from(*p) % i);
            }
            for p in parents {
                args.push("-p".into());
                args.push(ids[p].clone());
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ids.push(git(dir, &args));
    }
    for (i, id) in ids.iter().enumerate() {
        git(dir, &["update-ref", &format!("refs/heads/c{i}"), id]);
    }
    ids
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn ancestry_matches_merge_base_is_ancestor(
        picks in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 2..7)
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let ids = random_dag(dir, &picks);
        let (pack, _) = pack_file(dir, &["--delta-base-offset", "--all"], "");
        let scanner = scanned("sha1", &pack, 333);
        for a in &ids {
            for b in &ids {
                let git_says = run(dir, &["merge-base", "--is-ancestor", a, b], b"").status.success();
                let scanner_says = scanner.fast_forward(&oid(a), &oid(b)) == Ancestry::FastForward;
                prop_assert_eq!(git_says, scanner_says, "is {} an ancestor of {}", a, b);
            }
        }
    }
}

// ---- a loopback smart-HTTP origin ------------------------------------------

/// What the fake origin does with a receive-pack request.
#[derive(Clone)]
enum Mode {
    /// Runs `git receive-pack --stateless-rpc` on the bare repository.
    Forward,
    /// Answers `refusal_body` with this reason for every ref, and a message.
    Refuse(String, String),
}

/// Each receive-pack request body, and the response sent.
type Posts = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

struct Origin {
    url: String,
    bare: PathBuf,
    /// Each receive-pack request body, and the response sent.
    posts: Posts,
}

/// Serves `bare` over plain HTTP on 127.0.0.1 (one connection at a time,
/// `Connection: close`), with the advertisement less `drop_caps`.
fn origin(bare: &Path, mode: Mode, drop_caps: &'static [&'static str]) -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    let posts = Arc::new(Mutex::new(Vec::new()));
    let (bare2, posts2) = (bare.to_owned(), posts.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            serve(stream, &bare2, &mode, drop_caps, &posts2);
        }
    });
    Origin {
        url,
        bare: bare.to_owned(),
        posts,
    }
}

fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

fn serve(stream: TcpStream, bare: &Path, mode: &Mode, drop_caps: &[&str], posts: &Posts) {
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    assert!(
        !headers.contains_key("content-encoding"),
        "push bodies are not compressed"
    );
    let mut body = Vec::new();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).unwrap();
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = headers.get("content-length") {
        body.resize(len.parse().unwrap(), 0);
        reader.read_exact(&mut body).unwrap();
    }
    let (content_type, response) = if request_line.starts_with("GET ") {
        assert!(
            request_line.contains("service=git-receive-pack"),
            "{request_line}"
        );
        let out = run(
            bare,
            &["receive-pack", "--stateless-rpc", "--advertise-refs", "."],
            b"",
        );
        assert!(out.status.success());
        let mut adv = out.stdout;
        // Drop capabilities from the first line's list.
        let len = usize::from_str_radix(std::str::from_utf8(&adv[..4]).unwrap(), 16).unwrap();
        let mut first = adv[4..len].to_vec();
        for cap in drop_caps {
            let needle = format!(" {cap}");
            let text = String::from_utf8(first).unwrap();
            first = text
                .split_once('\0')
                .map(|(refs, caps)| {
                    format!(
                        "{refs}\0{}",
                        format!(" {caps}").replace(&needle, "").trim_start()
                    )
                })
                .unwrap()
                .into_bytes();
        }
        adv.splice(..len, pkt(&first));
        let mut body = pkt(b"# service=git-receive-pack\n");
        body.extend_from_slice(b"0000");
        body.extend(adv);
        ("application/x-git-receive-pack-advertisement", body)
    } else {
        let response = match mode {
            Mode::Forward => {
                let out = run(bare, &["receive-pack", "--stateless-rpc", "."], &body);
                assert!(out.status.success());
                out.stdout
            }
            Mode::Refuse(reason, message) => {
                let head = parse_push_head(&body).unwrap().unwrap();
                let refs: Vec<_> = head
                    .updates
                    .iter()
                    .map(|u| (u.name.clone(), RefStatus::Ng(reason.clone())))
                    .collect();
                refusal_body(&head.capabilities, &refs, std::slice::from_ref(message))
            }
        };
        posts.lock().unwrap().push((body, response.clone()));
        ("application/x-git-receive-pack-result", response)
    };
    let mut stream = reader.into_inner();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        response.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&response);
}

/// A bare origin holding `main` at the first commit of a work repository
/// with three commits; returns (work dir, origin, the three ids).
fn pushed_setup(
    tmp: &Path,
    format: &str,
    mode: Mode,
    drop_caps: &'static [&'static str],
) -> (PathBuf, Origin, Vec<String>) {
    let work = tmp.join("work");
    let bare = tmp.join("origin.git");
    std::fs::create_dir_all(&work).unwrap();
    repo(&work, format);
    let mut ids = vec![commit(&work, "a", b"one\n", "one")];
    git(
        tmp,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            &format!("--object-format={format}"),
            bare.to_str().unwrap(),
        ],
    );
    git(&bare, &["config", "receive.advertisePushOptions", "true"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    ids.push(commit(&work, "a", b"two\n", "two"));
    ids.push(commit(&work, "b", b"three\n", "three"));
    let origin = origin(&bare, mode, drop_caps);
    git(&work, &["remote", "add", "origin", &origin.url]);
    (work, origin, ids)
}

fn last_post(origin: &Origin) -> (Vec<u8>, Vec<u8>) {
    origin
        .posts
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a receive-pack request")
}

fn head_of(body: &[u8]) -> PushHead {
    parse_push_head(body)
        .expect("a real head parses")
        .expect("a real head is complete")
}

// ---- real pushes -------------------------------------------------------------

#[test]
fn a_real_push_of_two_refs_with_options_parses_and_its_pack_proves_the_fast_forward() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, origin, ids) = pushed_setup(tmp.path(), "sha1", Mode::Forward, &[]);
    git(&work, &["branch", "topic", &ids[1]]);
    git(
        &work,
        &[
            "push", "-q", "-o", "ci.skip", "-o", "x=y", "origin", "main", "topic",
        ],
    );
    // The positive control: the push landed.
    assert_eq!(git(&origin.bare, &["rev-parse", "main"]), ids[2]);
    let (body, response) = last_post(&origin);
    let head = head_of(&body);
    let updates: Vec<_> = head
        .updates
        .iter()
        .map(|u| {
            (
                u.name.as_str(),
                u.old.as_str().to_owned(),
                u.new.as_str().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        updates,
        [
            ("refs/heads/main", ids[0].clone(), ids[2].clone()),
            ("refs/heads/topic", "0".repeat(40), ids[1].clone()),
        ]
    );
    assert!(head.has_capability("report-status") || head.has_capability("report-status-v2"));
    assert!(head.has_capability("side-band-64k"));
    assert!(head.has_capability("push-options"));
    assert_eq!(head.push_options, ["ci.skip", "x=y"]);
    let pack = &body[head.consumed..];
    assert_eq!(&pack[..4], b"PACK");
    let scanner = scanned(head.object_format(), pack, 100);
    assert_eq!(
        scanner.fast_forward(&oid(&ids[0]), &oid(&ids[2])),
        Ancestry::FastForward
    );
    assert_eq!(
        scanner.fast_forward(&oid(&ids[2]), &oid(&ids[0])),
        Ancestry::Unproven
    );
    // The origin's answer, read as the relay reads it.
    let mut reader = ReportReader::new(&head.capabilities);
    for piece in response.chunks(5) {
        reader.feed(piece).unwrap();
    }
    assert!(reader.complete());
    assert_eq!(
        reader.results(),
        (
            Some("ok".into()),
            vec![
                ("refs/heads/main".into(), RefStatus::Ok),
                ("refs/heads/topic".into(), RefStatus::Ok),
            ]
        )
    );
}

#[test]
fn a_real_force_push_is_unproven_and_a_delete_has_no_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, origin, ids) = pushed_setup(tmp.path(), "sha1", Mode::Forward, &[]);
    git(&work, &["push", "-q", "origin", "main"]);
    // Rewrite: main back to the first commit, a different second one.
    git(&work, &["reset", "-q", "--hard", &ids[0]]);
    let rewritten = commit(&work, "c", b"other\n", "rewritten");
    git(&work, &["push", "-q", "--force", "origin", "main"]);
    assert_eq!(git(&origin.bare, &["rev-parse", "main"]), rewritten);
    let (body, _) = last_post(&origin);
    let head = head_of(&body);
    assert_eq!(head.updates[0].old.as_str(), ids[2]);
    assert_eq!(head.updates[0].new.as_str(), rewritten);
    let scanner = scanned("sha1", &body[head.consumed..], 64);
    assert_eq!(
        scanner.fast_forward(&head.updates[0].old, &head.updates[0].new),
        Ancestry::Unproven,
        "a rewrite is not a fast-forward"
    );
    // A delete: new id zero, nothing after the head.
    git(&work, &["push", "-q", "origin", "main:refs/heads/gone"]);
    git(&work, &["push", "-q", "origin", ":refs/heads/gone"]);
    let (body, response) = last_post(&origin);
    let head = head_of(&body);
    assert_eq!(head.updates.len(), 1);
    assert!(head.updates[0].new.is_zero());
    assert_eq!(head.updates[0].old.as_str(), rewritten);
    assert_eq!(head.consumed, body.len(), "a delete sends no pack");
    let mut reader = ReportReader::new(&head.capabilities);
    reader.feed(&response).unwrap();
    assert_eq!(
        reader.results().1,
        [("refs/heads/gone".into(), RefStatus::Ok)]
    );
}

#[test]
fn the_origins_refusal_is_read_as_ng() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, origin, _) = pushed_setup(tmp.path(), "sha1", Mode::Forward, &[]);
    git(&origin.bare, &["config", "receive.denyDeletes", "true"]);
    let out = run(&work, &["push", "origin", ":refs/heads/main"], b"");
    assert!(!out.status.success());
    let (body, response) = last_post(&origin);
    let mut reader = ReportReader::new(&head_of(&body).capabilities);
    reader.feed(&response).unwrap();
    let (unpack, refs) = reader.results();
    assert_eq!(unpack.as_deref(), Some("ok"));
    assert!(
        matches!(&refs[..], [(name, RefStatus::Ng(why))] if name == "refs/heads/main" && why.contains("deletion prohibited")),
        "{refs:?}"
    );
}

#[test]
fn a_real_shallow_push_sends_shallow_lines_that_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, origin, ids) = pushed_setup(tmp.path(), "sha1", Mode::Forward, &[]);
    git(&work, &["push", "-q", "origin", "main"]);
    let shallow = tmp.path().join("shallow");
    let file_url = format!("file://{}", origin.bare.display());
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            &file_url,
            shallow.to_str().unwrap(),
        ],
    );
    let new = commit(&shallow, "s", b"shallow\n", "from a shallow clone");
    git(&shallow, &["remote", "set-url", "origin", &origin.url]);
    git(&shallow, &["push", "-q", "origin", "main"]);
    let (body, _) = last_post(&origin);
    assert!(
        body.windows(8).take(200).any(|w| w == b"shallow "),
        "git sent a shallow line"
    );
    let head = head_of(&body);
    assert_eq!(head.updates.len(), 1);
    assert_eq!(head.updates[0].old.as_str(), ids[2]);
    assert_eq!(head.updates[0].new.as_str(), new);
    let scanner = scanned("sha1", &body[head.consumed..], 1 << 16);
    assert_eq!(
        scanner.fast_forward(&oid(&ids[2]), &oid(&new)),
        Ancestry::FastForward
    );
}

#[test]
fn a_real_sha256_push_parses_with_64_digit_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, origin, ids) = pushed_setup(tmp.path(), "sha256", Mode::Forward, &[]);
    git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(git(&origin.bare, &["rev-parse", "main"]), ids[2]);
    let (body, _) = last_post(&origin);
    let head = head_of(&body);
    assert_eq!(head.object_format(), "sha256");
    assert_eq!(head.updates[0].new.as_str(), ids[2]);
    let scanner = scanned("sha256", &body[head.consumed..], 1000);
    assert_eq!(
        scanner.fast_forward(&oid(&ids[0]), &oid(&ids[2])),
        Ancestry::FastForward
    );
}

fn refused_push(drop_caps: &'static [&'static str]) {
    let tmp = tempfile::tempdir().unwrap();
    let reason = "refused by palisade: rule `deny-main`".to_owned();
    let message = "palisade: this push waits for no one".to_owned();
    let (work, origin, ids) =
        pushed_setup(tmp.path(), "sha1", Mode::Refuse(reason, message), drop_caps);
    git(&work, &["branch", "topic", &ids[1]]);
    let out = run(&work, &["push", "origin", "main", "topic"], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "git push fails: {stderr}");
    assert!(
        stderr.contains("! [remote rejected] main -> main (refused by palisade: rule `deny-main`)"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("! [remote rejected] topic -> topic (refused by palisade: rule `deny-main`)"),
        "{stderr}"
    );
    if drop_caps.is_empty() {
        assert!(
            stderr.contains("remote: palisade: this push waits for no one"),
            "{stderr}"
        );
    }
    let (body, _) = last_post(&origin);
    let head = head_of(&body);
    let banded = head.has_capability("side-band-64k") || head.has_capability("side-band");
    assert_eq!(banded, drop_caps.is_empty(), "{:?}", head.capabilities);
    // Nothing reached the repository.
    assert_eq!(git(&origin.bare, &["rev-parse", "main"]), ids[0]);
    assert!(
        !run(&origin.bare, &["rev-parse", "--verify", "topic"], b"")
            .status
            .success()
    );
}

#[test]
fn git_prints_the_refusal_as_remote_rejected_with_the_reason() {
    refused_push(&[]);
}

#[test]
fn git_prints_the_refusal_without_a_side_band() {
    refused_push(&["side-band-64k"]);
}
