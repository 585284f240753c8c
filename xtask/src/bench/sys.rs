//! Process, port and machine helpers shared by the suites: finding peers on
//! `PATH`, running a command with a deadline, killing what we started, and
//! reading `/proc`.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The full path of `name` on `PATH`, if it is an executable file.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs `cmd` to completion with a deadline, capturing stdout and stderr.
/// A command still running at the deadline is killed and reported.
pub(crate) fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    output_within_from(cmd, Stdio::null(), limit)
}

/// [`output_within`] with `stdin` as the command's standard input.
pub(crate) fn output_within_from(
    cmd: &mut Command,
    stdin: Stdio,
    limit: Duration,
) -> Result<Output, String> {
    let mut child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", program(cmd)))?;
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let status = wait_within(&mut child, limit);
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{} did not finish within {}s and was killed",
            program(cmd),
            limit.as_secs()
        )),
    }
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Waits for `child` up to `limit`; kills and reaps it when it overruns.
pub(crate) fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// The pids of the live (not zombie) processes in process group `pgid`
/// (from `/proc`).
pub(crate) fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name (which may contain spaces and
            // parentheses): state, ppid, pgrp, ... A zombie (state `Z`)
            // has ended; whether its reaper has reaped it yet does not matter.
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = fields.next();
            let group = fields.nth(1).and_then(|g| g.parse::<u32>().ok());
            state != Some("Z") && group == Some(pgid)
        })
        .collect()
}

/// Waits until no process of process group `pgid` is left, at most
/// `limit`; then kills what is left (with `kill(1)`: no unsafe code in
/// xtask) and waits once more as long. Returns how long it waited.
///
/// The spawn suite starts each subject in its own group and drains it
/// before the next run: helpers a subject leaves behind after it exited
/// (srt's `socat` and `bwrap` live on for about a second and a half) must
/// not compete with the next subject for the CPUs.
pub(crate) fn drain_group(pgid: u32, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut killed = false;
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return start.elapsed();
        }
        if !killed && start.elapsed() >= limit {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            killed = true;
        } else if killed && start.elapsed() >= limit * 2 {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The program name of a command, for messages.
pub(crate) fn program(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// The first non-empty line of some output, trimmed, for messages.
pub(crate) fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

/// A child process that is killed and reaped when dropped, so that no
/// peer proxy outlives the harness, even on an early return.
#[derive(Debug)]
pub(crate) struct Guard {
    pub(crate) child: Child,
    pub(crate) name: String,
}

impl Guard {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Errors when the process has already exited.
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} exited early: {status}", self.name)),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that was free a moment ago.
pub(crate) fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

/// Waits until `addr` accepts a connection, while `guard` keeps running.
pub(crate) fn wait_listening(
    guard: &mut Guard,
    addr: SocketAddr,
    limit: Duration,
    log: &Path,
) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Err(e) = guard.check_alive() {
            return Err(format!("{e}; {}", log_tail(log)));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{} did not listen on {addr} within {}s; {}",
        guard.name,
        limit.as_secs(),
        log_tail(log)
    ))
}

/// Writes a fresh journal key to `key` with `palisade journal keygen`.
pub(crate) fn journal_keygen(palisade: &Path, key: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(key);
    let out = output_within(
        Command::new(palisade)
            .args(["journal", "keygen", "--out"])
            .arg(key),
        Duration::from_secs(30),
    )?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "palisade journal keygen: {}",
            first_line(&out.stderr)
        ))
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    if lines.is_empty() {
        format!("{} is empty", log.display())
    } else {
        let mut l = lines;
        l.reverse();
        format!("{}: {}", log.display(), l.join(" | "))
    }
}

/// Resident set size of a process in bytes, from `/proc/PID/status`.
pub(crate) fn rss_bytes(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("{path}: no VmRSS line"))
}

/// The soft limit on open files of this process.
pub(crate) fn nofile_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Raises this process's open-file limit with util-linux `prlimit` (no
/// unsafe code in xtask), up to the hard limit.
pub(crate) fn raise_nofile(want: u64) -> Result<u64, String> {
    let have = nofile_limit().unwrap_or(0);
    if have >= want {
        return Ok(have);
    }
    let pid = std::process::id().to_string();
    let limit = format!("--nofile={want}:{want}");
    let ok = output_within(
        Command::new("prlimit").args(["--pid", &pid, &limit]),
        Duration::from_secs(5),
    )
    .is_ok_and(|o| o.status.success());
    let now = nofile_limit().unwrap_or(0);
    if ok && now >= want {
        Ok(now)
    } else {
        Err(format!(
            "the open-file limit is {now} and could not be raised to {want} (run `ulimit -n {want}` first)"
        ))
    }
}

/// The machine the figures were taken on.
pub(crate) fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    json!({
        "cpu": model,
        "cores": cores,
        "memory_gib": (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "kernel": kernel,
        "os": os,
        "loadavg_1m_at_start": load,
    })
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ` (UTC), without a date crate.
pub(crate) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `sh -c script` as the leader of its own process group, waits
    /// for it, and returns the group id once a helper it left is seen.
    fn group_with_helper(script: &str) -> u32 {
        use std::os::unix::process::CommandExt;
        let mut leader = Command::new("/bin/sh")
            .args(["-c", script])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id();
        assert!(leader.wait().unwrap().success());
        // Control: the helper is still there, so the drain has something to wait for.
        assert!(!group_members(pgid).is_empty(), "the helper already ended");
        pgid
    }

    #[test]
    fn a_drained_group_has_outlived_its_leader_s_helpers() {
        let pgid = group_with_helper("sleep 0.4 & exit 0");
        let waited = drain_group(pgid, Duration::from_secs(5));
        assert!(
            group_members(pgid).is_empty(),
            "the group still has members"
        );
        assert!(
            waited >= Duration::from_millis(100),
            "waited only {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "the helper was killed: {waited:?}"
        );
    }

    #[test]
    fn a_group_that_will_not_end_is_killed() {
        let pgid = group_with_helper("sleep 30 & exit 0");
        let waited = drain_group(pgid, Duration::from_millis(200));
        assert!(
            group_members(pgid).is_empty(),
            "the helper survived the kill"
        );
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn a_command_past_its_deadline_is_killed() {
        let start = Instant::now();
        let r = output_within(Command::new("sleep").arg("5"), Duration::from_millis(100));
        assert!(r.unwrap_err().contains("killed"));
        assert!(start.elapsed() < Duration::from_secs(3));
        let ok = output_within(Command::new("echo").arg("hi"), Duration::from_secs(5)).unwrap();
        assert_eq!(first_line(&ok.stdout), "hi");
    }

    #[test]
    fn rss_of_self_is_positive() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }
}
