//! A governed session: the host policy, the egress proxy, the host relays,
//! the control channel, steering-path watching and one sealed journal, all
//! sharing one [`core::SessionCore`].
//!
//! `palisade run --policy …` starts a session around the sandboxed worker;
//! the pieces here are also what an embedding orchestrator would wire.

pub(crate) mod core;
pub(crate) mod launch;

use palisade_egress::addr::{AddressPolicy, Cidr};
use palisade_egress::proxy::{Limits, ProxyConfig};
use palisade_schema::host_policy::HostPolicy;

/// The proxy configuration a host policy asks for.
pub(crate) fn proxy_config(policy: &HostPolicy) -> Result<ProxyConfig, String> {
    let mut allow = Vec::new();
    for c in &policy.egress.allow_addresses {
        allow.push(
            Cidr::new(c.addr(), c.prefix()).map_err(|e| {
                format!("egress.allow_addresses `{}/{}`: {e}", c.addr(), c.prefix())
            })?,
        );
    }
    let own = palisade_egress::net::interface_addresses().unwrap_or_default();
    let l = &policy.egress.limits;
    let limits = Limits {
        bytes_per_connection: l.bytes_per_connection,
        bytes_per_session: l.bytes_per_session,
        max_connections: l
            .connections
            .and_then(|c| usize::try_from(c).ok())
            .unwrap_or(Limits::default().max_connections),
        per_minute: l.per_minute.and_then(|p| u32::try_from(p).ok()),
        ..Limits::default()
    };
    Ok(ProxyConfig {
        limits,
        token: None,
        require_sni_match: policy.egress.require_sni_match,
        sni_ports: vec![443],
        addresses: AddressPolicy::new(allow).with_own_addresses(own),
    })
}

#[cfg(test)]
mod tests;
