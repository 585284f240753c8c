//! Host facts the pure modules take as input: the host's own interface
//! addresses (a service bound to `0.0.0.0` answers on each of them).

use std::io;
use std::net::IpAddr;

/// Every address configured on the host's interfaces.
pub fn interface_addresses() -> io::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let Some(addr) = ifa.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_loopback() {
        let addrs = super::interface_addresses().unwrap();
        assert!(addrs.iter().any(|a| a.is_loopback()), "{addrs:?}");
    }
}
