//! Name resolution on the host, behind a trait so tests can count lookups
//! and map names to loopback addresses.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves a host name to addresses. Called only for names the policy
/// already allowed.
pub trait Resolver: Send + Sync + fmt::Debug {
    /// All addresses of `name`.
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The host's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name, 0)).await?;
            let mut out: Vec<IpAddr> = Vec::new();
            for a in addrs {
                if !out.contains(&a.ip()) {
                    out.push(a.ip());
                }
            }
            Ok(out)
        })
    }
}

/// The host's resolver without a thread hop for names in the hosts file.
///
/// When the `hosts:` line of `/etc/nsswitch.conf` consults `files` first
/// (as Debian's default `files dns` does), glibc answers a name listed in
/// `/etc/hosts` from that file alone. This resolver does the same on the
/// calling task: it reads the file (again only when its size, modification
/// time or inode changed, one `stat` per lookup) and answers with **every**
/// address listed for the name, in file order. A name not listed there, a
/// listed name with an address it cannot parse, or any other `hosts:`
/// order goes to [`SystemResolver`] (`getaddrinfo` on tokio's blocking
/// pool), so answers match what glibc would return; only the order of
/// several addresses may differ (glibc sorts them by RFC 6724).
#[derive(Debug)]
pub struct HostsFirstResolver {
    /// `None`: the hosts file is not consulted first; always `getaddrinfo`.
    hosts: Option<PathBuf>,
    cache: Mutex<Option<(FileStamp, Arc<HostsTable>)>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    ino: u64,
}

/// Name (lowercase) → addresses; `None` marks a name with an address that
/// did not parse (so the lookup falls back to `getaddrinfo`).
#[derive(Debug, Default)]
struct HostsTable(HashMap<String, Option<Vec<IpAddr>>>);

impl HostsTable {
    fn parse(text: &str) -> Self {
        let mut map: HashMap<String, Option<Vec<IpAddr>>> = HashMap::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default();
            let mut fields = line.split_ascii_whitespace();
            let Some(addr) = fields.next() else { continue };
            let ip = addr.parse::<IpAddr>().ok();
            for name in fields {
                let entry = map
                    .entry(name.to_ascii_lowercase())
                    .or_insert_with(|| Some(Vec::new()));
                match (entry.as_mut(), ip) {
                    (Some(list), Some(ip)) => {
                        if !list.contains(&ip) {
                            list.push(ip);
                        }
                    }
                    _ => *entry = None,
                }
            }
        }
        Self(map)
    }
}

impl HostsFirstResolver {
    /// Reads `/etc/nsswitch.conf` once to see whether `/etc/hosts` is consulted first.
    pub fn system() -> Self {
        let files_first = std::fs::read_to_string("/etc/nsswitch.conf")
            .is_ok_and(|conf| nsswitch_files_first(&conf));
        Self::new(files_first.then(|| PathBuf::from("/etc/hosts")))
    }

    /// A resolver that answers from `hosts` first (`None`: never).
    pub fn new(hosts: Option<PathBuf>) -> Self {
        Self {
            hosts,
            cache: Mutex::new(None),
        }
    }

    /// The addresses `hosts` lists for `name`, if it lists the name and
    /// every address of it parsed.
    fn lookup_file(&self, hosts: &Path, name: &str) -> Option<Vec<IpAddr>> {
        let meta = std::fs::metadata(hosts).ok()?;
        let stamp = FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            ino: std::os::unix::fs::MetadataExt::ino(&meta),
        };
        let mut cache = self.cache.lock().ok()?;
        let table = match cache.as_ref() {
            Some((s, t)) if *s == stamp => Arc::clone(t),
            _ => {
                let table = Arc::new(HostsTable::parse(&std::fs::read_to_string(hosts).ok()?));
                *cache = Some((stamp, Arc::clone(&table)));
                table
            }
        };
        drop(cache);
        let found = table.0.get(&name.to_ascii_lowercase())?.clone()?;
        (!found.is_empty()).then_some(found)
    }
}

/// Whether the `hosts:` line of an nsswitch.conf names `files` first.
fn nsswitch_files_first(conf: &str) -> bool {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .find_map(|l| l.strip_prefix("hosts:"))
        .and_then(|sources| sources.split_ascii_whitespace().next())
        == Some("files")
}

impl Resolver for HostsFirstResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        if let Some(found) = self
            .hosts
            .as_deref()
            .and_then(|h| self.lookup_file(h, name))
        {
            return Box::pin(std::future::ready(Ok(found)));
        }
        SystemResolver.resolve(name)
    }
}

/// A fixed name → addresses table that counts lookups (tests, benchmarks).
#[derive(Debug, Default)]
pub struct StaticResolver {
    map: HashMap<String, Vec<IpAddr>>,
    lookups: AtomicUsize,
}

impl StaticResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Map `name` to `addrs`.
    #[must_use]
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> Self {
        self.map.insert(name.to_ascii_lowercase(), addrs.to_vec());
        self
    }

    /// How many lookups were made.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let res = self
            .map
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"));
        Box::pin(async move { res })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsswitch_order_is_read_from_the_hosts_line() {
        assert!(nsswitch_files_first("passwd: files\nhosts:  files dns\n"));
        assert!(nsswitch_files_first(
            "hosts: files myhostname mdns4_minimal [NOTFOUND=return] dns"
        ));
        assert!(!nsswitch_files_first("hosts: dns files"));
        assert!(!nsswitch_files_first(
            "hosts: resolve [!UNAVAIL=return] files dns"
        ));
        assert!(!nsswitch_files_first("# hosts: files dns\npasswd: files"));
        assert!(!nsswitch_files_first(""));
    }

    #[tokio::test]
    async fn names_in_the_hosts_file_are_answered_from_it_and_follow_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(
            &path,
            "127.0.0.1 localhost\n# 10.0.0.9 commented.test\n127.0.1.1 Origin.Test alias.test # trailing\n::1 origin.test\n127.0.1.1 origin.test\nnot-an-ip broken.test\n",
        )
        .unwrap();
        let r = HostsFirstResolver::new(Some(path.clone()));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // every address of every line naming it, once, in file order
        assert_eq!(
            r.resolve("origin.test").await.unwrap(),
            [ip("127.0.1.1"), ip("::1")]
        );
        assert_eq!(r.resolve("ALIAS.test").await.unwrap(), [ip("127.0.1.1")]);
        assert_eq!(r.lookup_file(&path, "commented.test"), None);
        // an address that does not parse sends the name to getaddrinfo
        assert_eq!(r.lookup_file(&path, "broken.test"), None);
        // an edit is seen at the next lookup
        std::fs::write(&path, "127.0.2.2 origin.test\n").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(r.resolve("origin.test").await.unwrap(), [ip("127.0.2.2")]);
        assert_eq!(r.lookup_file(&path, "alias.test"), None);
        // without the hosts file first, names go to getaddrinfo
        let off = HostsFirstResolver::new(None);
        assert!(
            off.resolve("localhost")
                .await
                .unwrap()
                .iter()
                .all(IpAddr::is_loopback)
        );
    }
}
