//! Property tests of the one address rule: an IP literal (decided by
//! `palisade-policy` over `egress.allow_addresses`, then checked by the
//! proxy's [`AddressPolicy`]) and a name resolving to the same address
//! (checked by the [`AddressPolicy`] only) are matched alike, in every
//! spelling: IPv4-mapped addresses and ranges are their IPv4 forms.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use palisade_egress::addr::{AddrClass, AddressPolicy, Cidr, canonical_ip, classify};
use palisade_policy::egress::{RequestHost, decide_host};
use palisade_policy::verdict::Decision;
use palisade_schema::host_policy::{Cidr as PolicyCidr, HostPolicy, parse};
use palisade_taint::Session;
use proptest::prelude::*;

/// IPv4 addresses biased towards the ranges the deny set cares about.
fn v4() -> impl Strategy<Value = Ipv4Addr> {
    let first = prop_oneof![
        Just(0u8),
        Just(10),
        Just(127),
        Just(169),
        Just(172),
        Just(192),
        Just(8),
        Just(255),
        any::<u8>(),
    ];
    (first, any::<[u8; 3]>()).prop_map(|(a, [b, c, d])| Ipv4Addr::new(a, b, c, d))
}

/// An address in one of its spellings: IPv4, IPv4-mapped, IPv4-compatible,
/// or any IPv6 address (`::`, `::1` and unique-local included often).
fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        v4().prop_map(IpAddr::V4),
        v4().prop_map(|a| IpAddr::V6(a.to_ipv6_mapped())),
        v4().prop_map(|a| IpAddr::V6(a.to_ipv6_compatible())),
        Just(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        Just(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        any::<u64>()
            .prop_map(|low| IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) | u128::from(low)))),
        any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
    ]
}

fn mask(bits: u128, width: u8, prefix: u8) -> u128 {
    let host = u32::from(width - prefix);
    if host >= 128 {
        0
    } else {
        bits & !((1u128 << host) - 1)
    }
}

/// A range as an operator might write it: IPv4, IPv4-mapped IPv6 (prefix
/// 96 and up), or any IPv6 range (short prefixes included).
fn range() -> impl Strategy<Value = String> {
    prop_oneof![
        (v4(), 0u8..=32).prop_map(|(a, p)| {
            let net = Ipv4Addr::from(mask(u128::from(u32::from(a)), 32, p) as u32);
            format!("{net}/{p}")
        }),
        (v4(), 0u8..=32).prop_map(|(a, p)| {
            let net = Ipv4Addr::from(mask(u128::from(u32::from(a)), 32, p) as u32);
            format!("{}/{}", net.to_ipv6_mapped(), 96 + p)
        }),
        (address(), 0u8..=128).prop_map(|(a, p)| {
            let bits = match a {
                IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
                IpAddr::V6(v) => u128::from(v),
            };
            format!("{}/{p}", Ipv6Addr::from(mask(bits, 128, p)))
        }),
    ]
}

fn policy(range: &str) -> HostPolicy {
    let text = format!("[egress]\nallow = [\"name.test\"]\nallow_addresses = [\"{range}\"]\n");
    parse("palisade.toml", &text).unwrap().into_value()
}

fn addresses(range: &str) -> AddressPolicy {
    AddressPolicy::new(vec![range.parse::<Cidr>().unwrap()])
}

/// The proxy's whole answer for the literal `ip`: the policy decision on
/// the literal, then the address check.
fn literal_allowed(p: &HostPolicy, a: &AddressPolicy, ip: IpAddr) -> bool {
    let v = decide_host(p, &Session::new(), &RequestHost::Ip(ip), 443);
    v.decision == Decision::Allow && a.check(ip).is_ok()
}

/// The proxy's answer for an allowed name that resolves to `ip`.
fn resolved_allowed(a: &AddressPolicy, ip: IpAddr) -> bool {
    a.check(ip).is_ok()
}

fn mapped(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) => Some(IpAddr::V6(a.to_ipv6_mapped())),
        IpAddr::V6(_) => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_literal_and_a_resolved_name_are_matched_alike(ip in address(), range in range()) {
        let p = policy(&range);
        let a = addresses(&range);
        let schema_range = PolicyCidr::parse(&range).unwrap();
        let egress_range: Cidr = range.parse().unwrap();
        // One containment rule in both crates.
        prop_assert_eq!(schema_range.contains(ip), egress_range.contains(ip), "{} in {}", ip, range);
        let literal = literal_allowed(&p, &a, ip);
        let resolved = resolved_allowed(&a, ip);
        // A literal never gets further than the same address by name ...
        prop_assert!(!literal || resolved, "{} in {}: literal allowed, resolved refused", ip, range);
        // ... and where only a carve-out can let the address through, both agree.
        if classify(canonical_ip(ip)) != AddrClass::Public {
            prop_assert_eq!(literal, resolved, "{} in {}", ip, range);
        }
        // Spelling an IPv4 address IPv4-mapped changes nothing.
        if let Some(m) = mapped(ip) {
            prop_assert_eq!(literal, literal_allowed(&p, &a, m), "{} vs {} in {}", ip, m, range);
            prop_assert_eq!(resolved, resolved_allowed(&a, m), "{} vs {} in {}", ip, m, range);
        }
    }
}

/// The reproduction from the report, as a fixed case, with its positive control.
#[test]
fn the_mapped_loopback_range_allows_the_literal_and_the_name_alike() {
    let range = "::ffff:127.0.0.0/104";
    let (p, a) = (policy(range), addresses(range));
    for spelled in ["::ffff:127.0.0.1", "127.0.0.1"] {
        let ip: IpAddr = spelled.parse().unwrap();
        assert!(literal_allowed(&p, &a, ip), "literal {spelled}");
        assert!(resolved_allowed(&a, ip), "resolved {spelled}");
    }
    // neighbours outside the range stay refused both ways
    for spelled in ["::ffff:10.0.0.1", "10.0.0.1", "::127.0.0.1"] {
        let ip: IpAddr = spelled.parse().unwrap();
        assert!(!literal_allowed(&p, &a, ip), "literal {spelled}");
        assert!(!resolved_allowed(&a, ip), "resolved {spelled}");
    }
}
