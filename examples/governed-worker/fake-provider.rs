//! The demo's fake inference provider: `cargo run -p palisade-cli --example
//! fake-provider -- --port PORT --ca-out FILE --name provider.test`.
//!
//! Serves TLS on 127.0.0.1:PORT, writes its CA certificate (PEM) to FILE,
//! prints `ready <addr>` and then one line per request it sees
//! (`seen POST /v1/messages x-api-key=<present|absent> authorization=<…>`),
//! never the header values themselves.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, reason = "the example reports what it sees")]

mod provider;

use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let mut port = 0u16;
    let mut ca_out = None;
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => port = args.next().and_then(|p| p.parse().ok()).ok_or("--port N")?,
            "--ca-out" => ca_out = args.next(),
            "--name" => names.push(args.next().ok_or("--name NAME")?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = provider::start(port, &names).await?;
    if let Some(path) = ca_out {
        std::fs::write(&path, &p.ca_pem).map_err(|e| format!("{path}: {e}"))?;
    }
    println!("ready {}", p.addr);
    let mut shown = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let seen = p.seen();
        for o in seen.iter().skip(shown) {
            let present = |v: &Option<String>| if v.is_some() { "present" } else { "absent" };
            println!(
                "seen {} {} x-api-key={} authorization={}",
                o.method,
                o.path,
                present(&o.x_api_key),
                present(&o.authorization)
            );
        }
        shown = seen.len();
    }
}
