#[path = "agents_common/fake.rs"]
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
