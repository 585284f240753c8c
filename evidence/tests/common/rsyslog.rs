//! A test's own rsyslogd (Debian `rsyslog rsyslog-relp`) on loopback:
//! its own config, work directory and pid file, never the system service.
//! It writes `%rawmsg%` of every message to `collected.log`. Shared by
//! `evidence/tests/ship_rsyslog.rs` and `cli/tests/proxy_ship.rs`. With
//! [`Rsyslog::start_tls`] it also listens for syslog over TLS (imtcp with
//! the gtls driver, Debian `rsyslog-gnutls`), asking for a client
//! certificate its CA signed (`x509/certvalid`).

#![allow(dead_code, reason = "each test binary uses part of the harness")]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palisade_evidence::JournalKey;
use palisade_evidence::ship::{Collector, ShipUrl};

pub(crate) const PACKAGES: &str =
    "install the Debian packages `rsyslog rsyslog-relp` (apt-get install rsyslog rsyslog-relp)";

pub(crate) fn rsyslogd() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join("rsyslogd"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("rsyslogd is not on PATH nor in /usr/sbin: {PACKAGES}"))
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One rsyslogd of the test's own.
pub(crate) struct Rsyslog {
    pub(crate) dir: PathBuf,
    pub(crate) relp: u16,
    pub(crate) tcp: u16,
    /// The TLS port (only with [`Rsyslog::start_tls`]).
    pub(crate) tls: u16,
    gtls: Option<Gtls>,
    child: Option<Child>,
}

/// The server side of the TLS listener: PEM files.
#[derive(Clone, Debug)]
pub(crate) struct Gtls {
    /// The CA that client certificates must be signed by.
    pub(crate) ca: PathBuf,
    /// The server's certificate.
    pub(crate) cert: PathBuf,
    /// Its key.
    pub(crate) key: PathBuf,
}

pub(crate) const GTLS_PACKAGE: &str =
    "install the Debian package `rsyslog-gnutls` (apt-get install rsyslog-gnutls)";

impl Rsyslog {
    pub(crate) fn start(dir: &Path) -> Self {
        Self::start_with(dir, None)
    }

    /// Also listens for syslog over TLS on [`Rsyslog::tls`].
    pub(crate) fn start_tls(dir: &Path, gtls: Gtls) -> Self {
        Self::start_with(dir, Some(gtls))
    }

    fn start_with(dir: &Path, gtls: Option<Gtls>) -> Self {
        let mut me = Self {
            dir: dir.to_owned(),
            relp: free_port(),
            tcp: free_port(),
            tls: if gtls.is_some() { free_port() } else { 0 },
            gtls,
            child: None,
        };
        me.spawn();
        me
    }

    pub(crate) fn out(&self) -> PathBuf {
        self.dir.join("collected.log")
    }

    pub(crate) fn spawn(&mut self) {
        let work = self.dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        // Direct queue: imrelp acknowledges a message only after omfile
        // wrote it, so an acknowledged record survives SIGKILL of rsyslog.
        let tls_input = self.gtls.as_ref().map_or_else(String::new, |g| {
            format!(
                r#"input(type="imtcp" address="127.0.0.1" port="{port}" ruleset="palisade" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/certvalid" streamDriver.CAFile="{ca}" streamDriver.CertFile="{cert}" streamDriver.KeyFile="{key}")
"#,
                port = self.tls,
                ca = g.ca.display(),
                cert = g.cert.display(),
                key = g.key.display(),
            )
        });
        let conf = format!(
            r#"global(workDirectory="{work}" maxMessageSize="2m")
module(load="imrelp")
module(load="imtcp")
template(name="palisade_raw" type="string" string="%rawmsg%\n")
ruleset(name="palisade" queue.type="Direct") {{
  action(type="omfile" file="{out}" template="palisade_raw" flushOnTXEnd="on" asyncWriting="off")
}}
input(type="imrelp" address="127.0.0.1" port="{relp}" ruleset="palisade" maxDataSize="2m")
input(type="imtcp" address="127.0.0.1" port="{tcp}" ruleset="palisade")
{tls_input}"#,
            work = work.display(),
            out = self.out().display(),
            relp = self.relp,
            tcp = self.tcp,
        );
        let conf_path = self.dir.join("rsyslog.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(rsyslogd())
            .arg("-n")
            .arg("-f")
            .arg(&conf_path)
            .arg("-i")
            .arg(self.dir.join("rsyslogd.pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("rsyslogd.stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start rsyslogd: {e}; {PACKAGES}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", self.relp)).is_err()
            || TcpStream::connect(("127.0.0.1", self.tcp)).is_err()
            || (self.gtls.is_some() && TcpStream::connect(("127.0.0.1", self.tls)).is_err())
        {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let err =
                    std::fs::read_to_string(self.dir.join("rsyslogd.stderr")).unwrap_or_default();
                panic!(
                    "rsyslogd exited ({status}) before listening (imrelp missing? {PACKAGES}; for TLS, {GTLS_PACKAGE}):\n{err}"
                );
            }
            assert!(
                Instant::now() < deadline,
                "rsyslogd did not listen within 15 s ({GTLS_PACKAGE} for TLS): {}",
                std::fs::read_to_string(self.dir.join("rsyslogd.stderr")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }

    pub(crate) fn relp_url(&self) -> ShipUrl {
        ShipUrl::parse(&format!("relp://127.0.0.1:{}", self.relp)).unwrap()
    }

    pub(crate) fn tcp_url(&self) -> ShipUrl {
        ShipUrl::parse(&format!("syslog+tcp://127.0.0.1:{}", self.tcp)).unwrap()
    }

    pub(crate) fn collected(&self, key: &JournalKey) -> palisade_evidence::ship::CentralReport {
        let mut collector = Collector::new(1 << 30);
        if let Ok(file) = std::fs::File::open(self.out()) {
            collector.push_reader(file).unwrap();
        }
        collector.finish(key)
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        self.kill9();
    }
}
