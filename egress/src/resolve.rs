//! Name resolution on the host, behind a trait so tests can count lookups
//! and map names to loopback addresses.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};

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
