//! A governed session: the host policy, the egress proxy, the host relays,
//! the control channel, steering-path watching and one sealed journal, all
//! sharing one [`core::SessionCore`].
//!
//! `palisade run --policy …` starts a session around the sandboxed worker;
//! the pieces here are also what an embedding orchestrator would wire.

pub(crate) mod agent;
pub(crate) mod core;
pub(crate) mod launch;
pub(crate) mod observe;

use palisade_egress::proxy::ProxyConfig;
use palisade_schema::host_policy::HostPolicy;

/// The proxy configuration a host policy asks for: exactly
/// [`ProxyConfig::from_egress`], as for `palisade proxy`.
pub(crate) fn proxy_config(policy: &HostPolicy) -> Result<ProxyConfig, String> {
    ProxyConfig::from_egress(&policy.egress).map_err(|e| {
        format!("cannot list this host's interface addresses (needed for the deny set): {e}")
    })
}

#[cfg(test)]
mod tests;
