//! A corpus of malformed and hostile proxy requests: each must get a clean
//! 4xx (or, where the client is still sending, a close) and a record; the
//! proxy must keep serving afterwards (positive control).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::*;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::ProxyConfig;
use palisade_egress::record::Outcome;
use palisade_egress::resolve::StaticResolver;

/// (name, raw request, expected status; 0 = a 4xx or a close is acceptable)
fn corpus() -> Vec<(&'static str, Vec<u8>, u16)> {
    let c = |name, s: &str, st| (name, s.as_bytes().to_vec(), st);
    let mut v = vec![
        c("garbage request line", "GARBAGE\r\n\r\n", 400),
        c("method only", "CONNECT\r\n\r\n", 400),
        c("no version", "CONNECT a.test:443\r\n\r\n", 400),
        c(
            "HTTP/2.0",
            "CONNECT a.test:443 HTTP/2.0\r\nHost: a.test:443\r\n\r\n",
            400,
        ),
        c("HTTP/0.9 style", "GET http://a.test/\r\n\r\n", 400),
        c(
            "lowercase method",
            "connect a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            400,
        ),
        c(
            "double space",
            "CONNECT  a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            400,
        ),
        c(
            "tab separator",
            "CONNECT\ta.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            400,
        ),
        c(
            "TRACE",
            "TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            405,
        ),
        c(
            "extension method",
            "PROPFIND http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            405,
        ),
        c(
            "port 0",
            "CONNECT a.test:0 HTTP/1.1\r\nHost: a.test:0\r\n\r\n",
            400,
        ),
        c(
            "port 65536",
            "CONNECT a.test:65536 HTTP/1.1\r\nHost: a.test:65536\r\n\r\n",
            400,
        ),
        c(
            "negative port",
            "CONNECT a.test:-1 HTTP/1.1\r\nHost: a.test:-1\r\n\r\n",
            400,
        ),
        c(
            "leading-zero port",
            "CONNECT a.test:0443 HTTP/1.1\r\nHost: a.test:0443\r\n\r\n",
            400,
        ),
        c(
            "missing port",
            "CONNECT a.test HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "empty port",
            "CONNECT a.test: HTTP/1.1\r\nHost: a.test:\r\n\r\n",
            400,
        ),
        c(
            "CONNECT [::1]:x",
            "CONNECT [::1]:x HTTP/1.1\r\nHost: [::1]:x\r\n\r\n",
            400,
        ),
        c(
            "unterminated IPv6",
            "CONNECT [::1:443 HTTP/1.1\r\n\r\n",
            400,
        ),
        c("unbracketed IPv6", "CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400),
        c(
            "IPv6 zone id",
            "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n",
            400,
        ),
        c(
            "userinfo in CONNECT",
            "CONNECT user:pw@a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            400,
        ),
        c(
            "userinfo in URL",
            "GET http://user@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "percent-encoded host",
            "CONNECT a%2etest:443 HTTP/1.1\r\n\r\n",
            400,
        ),
        c(
            "percent-encoded URL host",
            "GET http://%61.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c("hex IPv4", "CONNECT 0x7f.1:443 HTTP/1.1\r\n\r\n", 400),
        c(
            "decimal IPv4",
            "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n",
            400,
        ),
        c("octal IPv4", "CONNECT 0177.0.0.1:443 HTTP/1.1\r\n\r\n", 400),
        c(
            "empty label",
            "CONNECT a..test:443 HTTP/1.1\r\nHost: a..test:443\r\n\r\n",
            400,
        ),
        c(
            "hyphen label",
            "CONNECT -a.test:443 HTTP/1.1\r\nHost: -a.test:443\r\n\r\n",
            400,
        ),
        c(
            "backslash",
            "GET http://a.test\\@b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "https absolute form",
            "GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "origin form",
            "GET /index.html HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "fragment",
            "GET http://a.test/#x HTTP/1.1\r\nHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "duplicate Host",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
            400,
        ),
        c(
            "Host mismatch",
            "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
            400,
        ),
        c(
            "CONNECT Host mismatch",
            "CONNECT a.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n",
            400,
        ),
        c(
            "missing Host",
            "GET http://a.test/ HTTP/1.1\r\nAccept: */*\r\n\r\n",
            400,
        ),
        c(
            "CL and TE",
            "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        c(
            "two CL",
            "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
            400,
        ),
        c(
            "CL list",
            "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4, 4\r\n\r\n",
            400,
        ),
        c(
            "TE not chunked",
            "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            400,
        ),
        c(
            "TE in HTTP/1.0",
            "POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        c(
            "two TE",
            "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        c(
            "CONNECT with body",
            "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nContent-Length: 3\r\n\r\nabc",
            400,
        ),
        c(
            "obs-fold",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\n  2\r\n\r\n",
            400,
        ),
        c(
            "space before colon",
            "GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n",
            400,
        ),
        c(
            "empty header name",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n: x\r\n\r\n",
            400,
        ),
        c(
            "non-token header name",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX(y): 1\r\n\r\n",
            400,
        ),
        c(
            "missing colon",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nNoColon\r\n\r\n",
            400,
        ),
        c(
            "bare LF",
            "GET http://a.test/ HTTP/1.1\nHost: a.test\n\n",
            400,
        ),
        c(
            "bare CR",
            "GET http://a.test/ HTTP/1.1\rHost: a.test\r\n\r\n",
            400,
        ),
        c(
            "NUL in value",
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\0b\r\n\r\n",
            400,
        ),
        c(
            "duplicate Proxy-Authorization",
            "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nProxy-Authorization: Bearer a\r\nProxy-Authorization: Bearer b\r\n\r\n",
            400,
        ),
    ];
    v.push((
        "non-ASCII host",
        "CONNECT ünicode.test:443 HTTP/1.1\r\n\r\n"
            .as_bytes()
            .to_vec(),
        400,
    ));
    v.push((
        "binary junk",
        vec![0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0, b'\r', b'\n', b'\r', b'\n'],
        400,
    ));
    let huge = format!(
        "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    v.push(("huge header", huge.into_bytes(), 0));
    let mut many = String::from("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-{i}: 1\r\n"));
    }
    many.push_str("\r\n");
    v.push(("too many headers", many.into_bytes(), 431));
    let long_target = format!(
        "GET http://a.test/{} HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "p".repeat(9000)
    );
    v.push(("long target", long_target.into_bytes(), 400));
    v
}

#[tokio::test]
async fn malformed_corpus_gets_clean_refusals_and_records() {
    let origin = echo_origin().await;
    let config = {
        let mut built = ProxyConfig::default();
        built.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        built
    };
    let p = TestProxy::start(
        config,
        &["a.test", "127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new().with("a.test", &["127.0.0.1".parse().unwrap()]),
    )
    .await;
    let cases = corpus();
    assert!(cases.len() >= 30);
    for (i, (name, raw, want)) in cases.iter().enumerate() {
        let resp = raw_exchange(p.addr, raw).await;
        let status = status_of(&resp);
        if *want == 0 {
            assert!(
                resp.is_empty() || (400..500).contains(&status),
                "{name}: {resp:?}"
            );
        } else {
            assert_eq!(status, *want, "{name}: {resp:?}");
        }
        let r = p.last_record(i + 1).await;
        assert_eq!(r.outcome, Outcome::Denied, "{name}");
        assert!(r.reason.starts_with("bad_request:"), "{name}: {}", r.reason);
        assert!(r.resolved.is_none(), "{name}: nothing dialled");
    }
    assert_eq!(p.resolver.lookups(), 0, "no malformed request reached DNS");
    // positive control: a well-formed request on the same proxy still works
    let (mut s, h) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}
