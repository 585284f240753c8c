//! The address deny set: which resolved (or literal) IP addresses the proxy
//! and the relays refuse to dial, and the explicit CIDR carve-outs
//! (`egress.allow_addresses`) that let a range through.
//!
//! This module is pure: no IO, no clock. Interface addresses of the host
//! are passed in by the caller (see [`crate::net::interface_addresses`]).
//!
//! Rules, in order:
//! 0. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4 address it
//!    carries (the kernel dials it as that address), and a range inside
//!    `::ffff:0:0/96` is the IPv4 range it maps (`::ffff:127.0.0.0/104` is
//!    `127.0.0.0/8`); `palisade-schema`'s `Cidr`, which decides IP literals
//!    in `palisade-policy`, matches by the same rule.
//! 1. An unspecified address (`0.0.0.0/8`, `::`, so also `::ffff:0.0.0.0`)
//!    is always denied: Linux dials it as the local host, so no carve-out
//!    lets it through.
//! 2. An address covered by an explicit allow range **of its own family**
//!    (after rule 0) is allowed. An IPv4 range never allows any other IPv6
//!    spelling of the address (IPv4-compatible, NAT64, 6to4): embedded
//!    IPv4 only adds denials, never earns a carve-out.
//! 3. Otherwise the address is classified; every class other than
//!    [`AddrClass::Public`] is denied, and so is any of the host's own
//!    interface addresses.
//! 4. IPv6 forms that embed an IPv4 address (IPv4-compatible `::/96`,
//!    NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are classified by the
//!    embedded address when that is denied; NAT64, 6to4 and Teredo are
//!    denied as such even when the embedded address is public.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use palisade_schema::host_policy::Cidr;

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    }
}

/// The class of an address; everything but [`AddrClass::Public`] is denied
/// unless explicitly allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddrClass {
    /// A globally routable unicast address.
    Public,
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// Carrier-grade NAT `100.64.0.0/10`.
    SharedCgnat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// A cloud metadata endpoint (169.254.169.254, 100.100.100.200,
    /// 168.63.129.16, 192.0.0.192 and the IPv6 ones of AWS, GCP, OCI,
    /// Scaleway, Linode and Alibaba).
    CloudMetadata,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// IPv6 unique local `fc00::/7` (and the deprecated site-local `fec0::/10`).
    UniqueLocal,
    /// IANA special-purpose and documentation ranges (`192.0.0.0/24`,
    /// `192.0.2.0/24`, `198.18.0.0/15`, `198.51.100.0/24`, `203.0.113.0/24`,
    /// `192.88.99.0/24`, `2001:db8::/32`, `100::/64`, ...).
    SpecialPurpose,
    /// `240.0.0.0/4` and IPv6 outside `2000::/3`.
    Reserved,
    /// NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`.
    Nat64,
    /// 6to4 `2002::/16`.
    SixToFour,
    /// Teredo `2001::/32`.
    Teredo,
    /// One of the host's own interface addresses.
    OwnInterface,
}

impl AddrClass {
    /// A stable name for records and refusals.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::SharedCgnat => "shared_cgnat",
            Self::LinkLocal => "link_local",
            Self::CloudMetadata => "cloud_metadata",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::UniqueLocal => "unique_local",
            Self::SpecialPurpose => "special_purpose",
            Self::Reserved => "reserved",
            Self::Nat64 => "nat64",
            Self::SixToFour => "6to4",
            Self::Teredo => "teredo",
            Self::OwnInterface => "own_interface",
        }
    }
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(168, 63, 129, 16),
    Ipv4Addr::new(192, 0, 0, 192),
];

const METADATA_V6: [Ipv6Addr; 5] = [
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0xa9fe, 0xa9fe),
    Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42),
    Ipv6Addr::new(0xfd00, 0xa9fe, 0xa9fe, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, 0x100, 0x200),
];

fn in4(a: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    let m = mask32(prefix);
    u32::from(a) & m == u32::from(Ipv4Addr::from(net)) & m
}

fn in6(a: Ipv6Addr, net: Ipv6Addr, prefix: u8) -> bool {
    let m = mask128(prefix);
    u128::from(a) & m == u128::from(net) & m
}

/// Classify an IPv4 address.
pub fn classify_v4(a: Ipv4Addr) -> AddrClass {
    if METADATA_V4.contains(&a) {
        return AddrClass::CloudMetadata;
    }
    if a == Ipv4Addr::BROADCAST {
        return AddrClass::Broadcast;
    }
    let table: [([u8; 4], u8, AddrClass); 17] = [
        ([0, 0, 0, 0], 8, AddrClass::Unspecified),
        ([127, 0, 0, 0], 8, AddrClass::Loopback),
        ([10, 0, 0, 0], 8, AddrClass::Private),
        ([172, 16, 0, 0], 12, AddrClass::Private),
        ([192, 168, 0, 0], 16, AddrClass::Private),
        ([100, 64, 0, 0], 10, AddrClass::SharedCgnat),
        ([169, 254, 0, 0], 16, AddrClass::LinkLocal),
        ([224, 0, 0, 0], 4, AddrClass::Multicast),
        ([240, 0, 0, 0], 4, AddrClass::Reserved),
        ([192, 0, 0, 0], 24, AddrClass::SpecialPurpose),
        ([192, 0, 2, 0], 24, AddrClass::SpecialPurpose),
        ([192, 31, 196, 0], 24, AddrClass::SpecialPurpose),
        ([192, 52, 193, 0], 24, AddrClass::SpecialPurpose),
        ([192, 88, 99, 0], 24, AddrClass::SpecialPurpose),
        ([198, 18, 0, 0], 15, AddrClass::SpecialPurpose),
        ([198, 51, 100, 0], 24, AddrClass::SpecialPurpose),
        ([203, 0, 113, 0], 24, AddrClass::SpecialPurpose),
    ];
    for (net, prefix, class) in table {
        if in4(a, net, prefix) {
            return class;
        }
    }
    AddrClass::Public
}

/// The IPv4 address embedded in an IPv6 address, with the class of the
/// embedding, for mapped, compatible, NAT64 and 6to4 forms.
fn embedded_v4(a: Ipv6Addr) -> Option<(Ipv4Addr, Option<AddrClass>)> {
    let bits = u128::from(a);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if in6(a, Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
        return Some((low32, None));
    }
    if in6(a, Ipv6Addr::UNSPECIFIED, 96) {
        // `::` and `::1` are classified on their own before this is called.
        return Some((low32, None));
    }
    if in6(a, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return Some((low32, Some(AddrClass::Nat64)));
    }
    if in6(a, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return Some((v4, Some(AddrClass::SixToFour)));
    }
    None
}

/// Classify an IPv6 address (embedded IPv4 forms by the embedded address
/// when that is denied).
pub fn classify_v6(a: Ipv6Addr) -> AddrClass {
    if a == Ipv6Addr::UNSPECIFIED {
        return AddrClass::Unspecified;
    }
    if a == Ipv6Addr::LOCALHOST {
        return AddrClass::Loopback;
    }
    if let Some((v4, wrapper)) = embedded_v4(a) {
        let inner = classify_v4(v4);
        if inner != AddrClass::Public {
            return inner;
        }
        return wrapper.unwrap_or(AddrClass::Public);
    }
    if METADATA_V6.contains(&a) || in6(a, Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0), 32) {
        return AddrClass::CloudMetadata;
    }
    let table: [(Ipv6Addr, u8, AddrClass); 9] = [
        (
            Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
            48,
            AddrClass::Nat64,
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            32,
            AddrClass::Teredo,
        ),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
            32,
            AddrClass::SpecialPurpose,
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            23,
            AddrClass::SpecialPurpose,
        ),
        (
            Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
            64,
            AddrClass::SpecialPurpose,
        ),
        (
            Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
            7,
            AddrClass::UniqueLocal,
        ),
        (
            Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
            10,
            AddrClass::UniqueLocal,
        ),
        (
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
            10,
            AddrClass::LinkLocal,
        ),
        (
            Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
            8,
            AddrClass::Multicast,
        ),
    ];
    for (net, prefix, class) in table {
        if in6(a, net, prefix) {
            return class;
        }
    }
    if !in6(a, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return AddrClass::Reserved;
    }
    AddrClass::Public
}

/// Classify any address.
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

/// The address deny set plus explicit allow ranges and the host's own
/// interface addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow: Vec<Cidr>,
    own: Vec<IpAddr>,
}

/// An address refused by [`AddressPolicy::check`]. Its display names the
/// class only, never the address, so it can be sent to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("destination address not allowed ({class})")]
pub struct AddressDenied {
    /// The class that caused the refusal.
    pub class: AddrClass,
}

impl AddressPolicy {
    /// A policy with the given carve-outs and no own-interface list.
    pub fn new(allow: Vec<Cidr>) -> Self {
        Self {
            allow,
            own: Vec::new(),
        }
    }

    /// Add the host's own interface addresses to the deny set.
    #[must_use]
    pub fn with_own_addresses(mut self, own: Vec<IpAddr>) -> Self {
        self.own = own;
        self
    }

    /// The explicit allow ranges.
    pub fn allow_ranges(&self) -> &[Cidr] {
        &self.allow
    }

    /// The host's own interface addresses, denied unless a carve-out covers them.
    pub fn own_addresses(&self) -> &[IpAddr] {
        &self.own
    }

    /// Allowed, or the class that denies it.
    pub fn check(&self, ip: IpAddr) -> Result<(), AddressDenied> {
        let canon = canonical_ip(ip);
        if is_unspecified(canon) {
            return Err(AddressDenied {
                class: AddrClass::Unspecified,
            });
        }
        if self.allow.iter().any(|c| c.contains(canon)) {
            return Ok(());
        }
        let class = classify(canon);
        if class != AddrClass::Public {
            return Err(AddressDenied { class });
        }
        if self.own.iter().any(|o| canonical_ip(*o) == canon) {
            return Err(AddressDenied {
                class: AddrClass::OwnInterface,
            });
        }
        Ok(())
    }
}

/// `0.0.0.0/8` or `::` (after [`canonical_ip`]).
fn is_unspecified(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => in4(a, [0, 0, 0, 0], 8),
        IpAddr::V6(a) => a.is_unspecified(),
    }
}

/// IPv4-mapped IPv6 addresses as IPv4, everything else unchanged.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(a),
        },
        v4 @ IpAddr::V4(_) => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Known-answer table: address, expected class.
    const TABLE: &[(&str, AddrClass)] = &[
        ("0.0.0.0", AddrClass::Unspecified),
        ("0.1.2.3", AddrClass::Unspecified),
        ("127.0.0.1", AddrClass::Loopback),
        ("127.255.255.254", AddrClass::Loopback),
        ("10.0.0.1", AddrClass::Private),
        ("10.255.255.255", AddrClass::Private),
        ("172.16.0.1", AddrClass::Private),
        ("172.31.255.255", AddrClass::Private),
        ("172.15.255.255", AddrClass::Public),
        ("172.32.0.0", AddrClass::Public),
        ("192.168.1.5", AddrClass::Private),
        ("100.64.0.0", AddrClass::SharedCgnat),
        ("100.127.255.255", AddrClass::SharedCgnat),
        ("100.63.255.254", AddrClass::Public),
        ("100.128.0.1", AddrClass::Public),
        ("169.254.0.1", AddrClass::LinkLocal),
        ("169.254.169.254", AddrClass::CloudMetadata),
        ("100.100.100.200", AddrClass::CloudMetadata),
        ("168.63.129.16", AddrClass::CloudMetadata),
        ("192.0.0.192", AddrClass::CloudMetadata),
        ("224.0.0.1", AddrClass::Multicast),
        ("239.255.255.250", AddrClass::Multicast),
        ("255.255.255.255", AddrClass::Broadcast),
        ("240.0.0.1", AddrClass::Reserved),
        ("192.0.2.1", AddrClass::SpecialPurpose),
        ("198.18.0.1", AddrClass::SpecialPurpose),
        ("198.51.100.7", AddrClass::SpecialPurpose),
        ("203.0.113.9", AddrClass::SpecialPurpose),
        ("192.88.99.1", AddrClass::SpecialPurpose),
        ("8.8.8.8", AddrClass::Public),
        ("1.1.1.1", AddrClass::Public),
        ("93.184.216.34", AddrClass::Public),
        ("::", AddrClass::Unspecified),
        ("::1", AddrClass::Loopback),
        ("::ffff:127.0.0.1", AddrClass::Loopback),
        ("::ffff:169.254.169.254", AddrClass::CloudMetadata),
        ("::ffff:10.1.2.3", AddrClass::Private),
        ("::ffff:8.8.8.8", AddrClass::Public),
        ("::127.0.0.1", AddrClass::Loopback),
        ("::10.0.0.1", AddrClass::Private),
        ("64:ff9b::127.0.0.1", AddrClass::Loopback),
        ("64:ff9b::a9fe:a9fe", AddrClass::CloudMetadata),
        ("64:ff9b::8.8.8.8", AddrClass::Nat64),
        ("64:ff9b:1::1", AddrClass::Nat64),
        ("2002:7f00:1::", AddrClass::Loopback),
        ("2002:a9fe:a9fe::1", AddrClass::CloudMetadata),
        ("2002:808:808::1", AddrClass::SixToFour),
        ("2001::1", AddrClass::Teredo),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", AddrClass::Teredo),
        ("2001:db8::1", AddrClass::SpecialPurpose),
        ("100::1", AddrClass::SpecialPurpose),
        ("fc00::1", AddrClass::UniqueLocal),
        ("fdff:ffff::1", AddrClass::UniqueLocal),
        ("fec0::1", AddrClass::UniqueLocal),
        ("fe80::1", AddrClass::LinkLocal),
        ("febf::1", AddrClass::LinkLocal),
        ("ff02::2", AddrClass::Multicast),
        ("fd00:ec2::254", AddrClass::CloudMetadata),
        ("fd20:ce::254", AddrClass::CloudMetadata),
        ("fd00:c1::a9fe:a9fe", AddrClass::CloudMetadata),
        ("fd00:42::42", AddrClass::CloudMetadata),
        ("fd00:a9fe:a9fe::1", AddrClass::CloudMetadata),
        ("fd00:100::100:200", AddrClass::CloudMetadata),
        ("4000::1", AddrClass::Reserved),
        ("::2:3", AddrClass::Unspecified),
        ("2606:4700:4700::1111", AddrClass::Public),
        ("2a00:1450:4001:81b::200e", AddrClass::Public),
    ];

    #[test]
    fn known_answer_table() {
        for (addr, want) in TABLE {
            assert_eq!(classify(ip(addr)), *want, "classify({addr})");
            let verdict = AddressPolicy::default().check(ip(addr));
            if *want == AddrClass::Public {
                assert_eq!(verdict, Ok(()), "{addr} must be allowed");
            } else {
                assert_eq!(verdict, Err(AddressDenied { class: *want }), "{addr}");
            }
        }
    }

    #[test]
    fn carve_outs_allow_exactly_their_range() {
        let p = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert_eq!(p.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check(ip("127.9.9.9")), Ok(()));
        // neighbours stay denied
        assert!(p.check(ip("128.0.0.0")).is_ok());
        assert!(p.check(ip("126.255.255.255")).is_ok());
        assert!(p.check(ip("10.0.0.1")).is_err());
        assert!(p.check(ip("169.254.169.254")).is_err());
        // an IPv4-mapped address is the IPv4 address ...
        assert_eq!(p.check(ip("::ffff:127.0.0.1")), Ok(()));
        // ... but an IPv4 carve-out never allows another IPv6 spelling
        for v6 in ["::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"] {
            assert_eq!(
                p.check(ip(v6)),
                Err(AddressDenied {
                    class: AddrClass::Loopback
                }),
                "{v6}"
            );
        }
        // an IPv4-mapped range is the IPv4 range, for both spellings
        let p6 = AddressPolicy::new(vec!["::ffff:127.0.0.0/104".parse().unwrap()]);
        assert_eq!(p6.check(ip("::ffff:127.0.0.1")), Ok(()));
        assert_eq!(p6.check(ip("127.0.0.1")), Ok(()));
        assert!(p6.check(ip("::127.0.0.1")).is_err());
        assert!(p6.check(ip("::ffff:10.0.0.1")).is_err());
        // a wider IPv6 range does not reach into IPv4
        let all6 = AddressPolicy::new(vec!["::/0".parse().unwrap()]);
        assert_eq!(all6.check(ip("fd00::1")), Ok(()));
        assert!(all6.check(ip("::ffff:127.0.0.1")).is_err());
    }

    #[test]
    fn unspecified_addresses_are_denied_whatever_the_carve_outs() {
        let wide = AddressPolicy::new(vec![
            "0.0.0.0/0".parse().unwrap(),
            "::/0".parse().unwrap(),
            "::ffff:0.0.0.0/96".parse().unwrap(),
        ]);
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "0.255.255.255",
            "::",
            "::ffff:0.0.0.0",
            "::ffff:0.0.0.1",
        ] {
            assert_eq!(
                wide.check(ip(a)),
                Err(AddressDenied {
                    class: AddrClass::Unspecified
                }),
                "{a}"
            );
        }
        // positive control: the same carve-outs let loopback and the rest through
        for a in [
            "127.0.0.1",
            "1.0.0.0",
            "::1",
            "::ffff:127.0.0.1",
            "10.0.0.1",
        ] {
            assert_eq!(wide.check(ip(a)), Ok(()), "{a}");
        }
    }

    #[test]
    fn own_interface_addresses_are_denied_unless_allowed() {
        let p = AddressPolicy::default().with_own_addresses(vec![ip("8.8.4.4")]);
        assert_eq!(
            p.check(ip("8.8.4.4")),
            Err(AddressDenied {
                class: AddrClass::OwnInterface
            })
        );
        assert_eq!(
            p.check(ip("::ffff:8.8.4.4")),
            Err(AddressDenied {
                class: AddrClass::OwnInterface
            })
        );
        assert_eq!(p.check(ip("8.8.8.8")), Ok(()));
        let allowed = AddressPolicy::new(vec!["8.8.4.4/32".parse().unwrap()])
            .with_own_addresses(vec![ip("8.8.4.4")]);
        assert_eq!(allowed.check(ip("8.8.4.4")), Ok(()));
    }

    #[test]
    fn cidr_parsing_is_strict() {
        // The carve-outs are schema's `Cidr`, the one range type.
        assert_eq!(
            "10.0.0.0/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!("::1".parse::<Cidr>().unwrap().prefix(), 128);
        assert_eq!("1.2.3.4".parse::<Cidr>().unwrap().prefix(), 32);
        assert_eq!("0.0.0.0/0".parse::<Cidr>().unwrap().prefix(), 0);
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/08x",
            "010.0.0.0/8",
            "10.0.0/8",
            "example.com/8",
            "10.0.0.0/8/8",
            " 10.0.0.0/8",
            "::1/0128",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} must be refused");
        }
        let e = "127.0.0.1/8".parse::<Cidr>().unwrap_err();
        assert!(e.contains("host bits"), "{e}");
    }

    #[test]
    fn denial_message_names_class_not_address() {
        let e = AddressPolicy::default()
            .check(ip("169.254.169.254"))
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("cloud_metadata"), "{msg}");
        assert!(!msg.contains("169.254"), "{msg}");
    }
}
