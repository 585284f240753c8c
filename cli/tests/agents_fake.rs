//! The fake providers' HTTP/1.1 server checked with curl.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
#![allow(
    clippy::allow_attributes_without_reason,
    reason = "the shared agents_common/fake.rs has a bare allow(dead_code)"
)]
#[path = "agents_common/fake.rs"]
#[allow(unreachable_pub, reason = "shared by the agent suites")]
mod fake;
#[test]
fn the_fake_serves_an_sse_stream_to_curl() {
    let f = fake::Fake::start(|_, _| fake::Reply::sse(&[("ping", serde_json::json!({"a":1}))]));
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-d",
            "{\"x\":1}",
            &format!("{}/v1/messages", f.url()),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "event: ping\ndata: {\"a\":1}\n\n"
    );
    assert_eq!(f.seen()[0].json()["x"], 1);
}
