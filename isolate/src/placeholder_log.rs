//! Records of the placeholders a launch created, so that what a killed
//! launcher left in the host tree can be removed later.
//!
//! A launch creates empty read-only placeholders for absent protected names
//! in the writable roots (`.bash_profile`, `.git/hooks`, …) and removes
//! them when the sandbox has ended. A launcher killed with `SIGKILL` cannot:
//! an empty `.bash_profile` left in `$HOME` silently stops login shells from
//! reading `.profile`. So, before it lets the sandbox go on, the launcher
//! writes (and `fsync`s) one record file per launch in a private state
//! directory ([`crate::Sandbox::placeholder_records`]: owned by the
//! effective uid, mode `0700`, not a symlink, as for the socket-walk
//! cache): its pid and start time, and for every placeholder its path, its
//! device, inode and status-change time, and its directory's device and
//! inode. The record is deleted once the placeholders are removed.
//!
//! [`clean_stale`] (run before each launch that names the directory, and by
//! `palisade cleanup`) takes every record whose launcher is gone (no
//! process with that pid and start time) and removes each placeholder only
//! if it is provably the one the launch made: reached through the same
//! directory (device and inode, no symlink followed), the same inode with
//! the same status-change time (so neither a file the user made since, even
//! on a reused inode number, nor one they changed the mode or owner of),
//! and still empty. Anything else is kept and reported, never removed.
//!
//! Not covered: a launcher killed between creating its placeholders and
//! writing the record (a few system calls) leaves them unrecorded, and a
//! launcher in another PID namespace sharing the directory is judged by a
//! pid that means something else there.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::plan::{self, Placeholder, Removal};
use crate::walk_cache::CacheDir;

/// First line of a record file.
const MAGIC: &str = "palisade-placeholders 1";
/// Record files are named `<PREFIX><pid>-<n>`.
const PREFIX: &str = "placeholders-";
/// Largest record file read.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// One launch's record file: deleted when the last placeholder holding it
/// is dropped (after the placeholders are removed).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RecordFile {
    path: PathBuf,
}

impl Drop for RecordFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The start time of a process (`/proc/<pid>/stat` field 22), `None` when
/// there is no such process.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The text of a record.
fn render(pid: u32, start: u64, created: &[Placeholder]) -> String {
    let mut out = format!("{MAGIC}\nlauncher {pid} {start}\n");
    for p in created {
        out.push_str(&format!(
            "p {} {} {} {} {} {} {}\n",
            p.dev,
            p.ino,
            p.ctime.0,
            p.ctime.1,
            p.parent_dev,
            p.parent_ino,
            hex::encode(std::os::unix::ffi::OsStrExt::as_bytes(p.path.as_os_str()))
        ));
    }
    out
}

/// A parsed record: the launcher's pid and start time, and the
/// placeholders. Lines that do not parse are reported by number.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) launcher: Option<(u32, u64)>,
    pub(crate) placeholders: Vec<Placeholder>,
    pub(crate) bad_lines: Vec<usize>,
}

/// Parse a record file; `None` when it is not one (wrong first line).
pub(crate) fn parse(text: &str) -> Option<Parsed> {
    let mut lines = text.split_inclusive('\n').enumerate();
    let (_, first) = lines.next()?;
    if first.trim_end_matches('\n') != MAGIC {
        return None;
    }
    let mut out = Parsed {
        launcher: None,
        placeholders: Vec::new(),
        bad_lines: Vec::new(),
    };
    for (i, line) in lines {
        // A line cut short by a kill while writing has no newline.
        let Some(line) = line.strip_suffix('\n') else {
            out.bad_lines.push(i + 1);
            continue;
        };
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["launcher", pid, start] if out.launcher.is_none() => {
                match (pid.parse(), start.parse()) {
                    (Ok(pid), Ok(start)) => out.launcher = Some((pid, start)),
                    _ => out.bad_lines.push(i + 1),
                }
            }
            ["p", dev, ino, cs, cns, pdev, pino, path] => {
                let nums = (
                    dev.parse(),
                    ino.parse(),
                    cs.parse(),
                    cns.parse(),
                    pdev.parse(),
                    pino.parse(),
                );
                let path = hex::decode(path).ok().map(|b| {
                    PathBuf::from(
                        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b),
                    )
                });
                match (nums, path) {
                    ((Ok(dev), Ok(ino), Ok(cs), Ok(cns), Ok(pdev), Ok(pino)), Some(path))
                        if path.is_absolute() =>
                    {
                        out.placeholders.push(Placeholder {
                            path,
                            parent_dev: pdev,
                            parent_ino: pino,
                            dev,
                            ino,
                            ctime: (cs, cns),
                            record: None,
                        });
                    }
                    _ => out.bad_lines.push(i + 1),
                }
            }
            _ => out.bad_lines.push(i + 1),
        }
    }
    Some(out)
}

/// Distinguishes the records of concurrent launches from one process.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Write the record of `created` in `dir` (fsynced) and attach it to every
/// placeholder, so that it is deleted once they are removed. A directory
/// that is not private, or a write that fails, leaves the placeholders
/// unrecorded (as without a state directory): the record only helps a
/// later cleanup, it guards nothing.
pub(crate) fn record(dir: &Path, created: &mut [Placeholder]) {
    use std::io::Write;
    if created.is_empty() || CacheDir::open(dir).is_err() {
        return;
    }
    let pid = std::process::id();
    let Some(start) = start_time(pid) else {
        return;
    };
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{PREFIX}{pid}-{n}"));
    let mut opts = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NOFOLLOW);
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let Ok(mut file) = opts.write(true).create_new(true).open(&path) else {
        return;
    };
    let text = render(pid, start, created);
    if file.write_all(text.as_bytes()).is_err() || file.sync_all().is_err() {
        let _ = std::fs::remove_file(&path);
        return;
    }
    let rec = Arc::new(RecordFile { path });
    for p in created {
        p.record = Some(Arc::clone(&rec));
    }
}

/// What [`clean_stale`] did.
#[derive(Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StaleCleanup {
    /// Placeholders removed.
    pub removed: Vec<PathBuf>,
    /// Recorded placeholders kept, with the reason (not empty, another
    /// file, its directory changed).
    pub kept: Vec<(PathBuf, String)>,
    /// Record files of launchers still running, left alone.
    pub live: usize,
    /// Problems with record files (`file:line: …`), which are kept.
    pub problems: Vec<String>,
}

/// Remove the placeholders that launchers which are gone left behind,
/// from the records in `dir`; see the module documentation for what is
/// proved before anything is removed. A directory that does not exist
/// holds nothing; one that is not private is an error.
pub fn clean_stale(dir: &Path) -> Result<StaleCleanup, String> {
    let mut out = StaleCleanup::default();
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(out);
    }
    CacheDir::open(dir)?;
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
        .map(|e| e.path())
        .collect();
    files.sort();
    for file in files {
        let text = match read_bounded(&file) {
            Ok(t) => t,
            Err(e) => {
                out.problems.push(format!("{}: {e}", file.display()));
                continue;
            }
        };
        let Some(parsed) = parse(&text) else {
            out.problems
                .push(format!("{}:1: not a placeholder record", file.display()));
            continue;
        };
        for l in &parsed.bad_lines {
            out.problems
                .push(format!("{}:{l}: malformed line, skipped", file.display()));
        }
        let Some((pid, start)) = parsed.launcher else {
            out.problems
                .push(format!("{}: no launcher line", file.display()));
            continue;
        };
        if start_time(pid) == Some(start) {
            out.live += 1;
            continue;
        }
        for (path, removal) in plan::remove_placeholders_reporting(&parsed.placeholders) {
            match removal {
                Removal::Removed => out.removed.push(path),
                Removal::Gone => {}
                Removal::Kept(why) => out.kept.push((path, why.to_owned())),
            }
        }
        let _ = std::fs::remove_file(&file);
    }
    Ok(out)
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NOFOLLOW);
    let f = opts.read(true).open(path)?;
    let mut s = String::new();
    f.take(MAX_RECORD_BYTES + 1).read_to_string(&mut s)?;
    if s.len() as u64 > MAX_RECORD_BYTES {
        return Err(std::io::Error::other("larger than 1 MiB"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Placeholder {
        Placeholder {
            path: PathBuf::from("/w/with space/.bashrc"),
            parent_dev: 1,
            parent_ino: 2,
            dev: 3,
            ino: 4,
            ctime: (5, 6),
            record: None,
        }
    }

    #[test]
    fn a_record_parses_back_and_bad_lines_are_located() {
        let text = render(7, 8, &[sample()]);
        let parsed = parse(&text).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(parsed.launcher, Some((7, 8)));
        assert_eq!(parsed.placeholders, vec![sample()]);
        assert!(parsed.bad_lines.is_empty());
        // A relative path, a bad number, a line cut short: each named by
        // its line, the good line kept.
        let bad = format!(
            "{text}p 1 2 3 4 5 6 {}\np x 2 3 4 5 6 00\np 1 2",
            hex::encode("rel")
        );
        let parsed = parse(&bad).unwrap_or_else(|| panic!("{bad}"));
        assert_eq!(parsed.placeholders.len(), 1);
        assert_eq!(parsed.bad_lines, vec![4, 5, 6]);
        assert_eq!(parse("garbage\n"), None);
        assert_eq!(parse(""), None);
    }
}
