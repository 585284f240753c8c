//! The proxy floor (`cargo bench -p palisade-egress --bench floor`, started
//! by `cargo xtask bench proxy` as the subject `floor`): the least a CONNECT
//! relay on tokio can do, to measure `palisade proxy` against.
//!
//! `floor --listen 127.0.0.1:PORT` accepts, reads the CONNECT request head
//! (up to 16 KiB), resolves the target once with the system resolver
//! (`getaddrinfo`, as a plain relay would), dials the first address, answers
//! `200`, then copies both ways with `tokio::io::copy_bidirectional` until
//! either side closes. No decisions, no records, no limits, no
//! authentication. It listens on and dials loopback addresses only (a
//! target resolving elsewhere gets `403`); it runs until killed.
//!
//! Run as a bench (`--bench`, or without `--listen`), it prints nothing on
//! stdout and exits: it has no figures of its own.
#![allow(
    clippy::print_stderr,
    clippy::indexing_slicing,
    missing_docs,
    reason = "benchmark helper"
)]

use std::net::{SocketAddr, ToSocketAddrs};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest request head read before giving up on a connection.
const MAX_HEAD: usize = 16 * 1024;

/// The CONNECT target of a request head, if it is one.
fn connect_target(head: &[u8]) -> Option<&str> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut words = line.split(' ');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("CONNECT"), Some(target), Some(v), None) if v.starts_with("HTTP/1.") => Some(target),
        _ => None,
    }
}

async fn serve(mut client: TcpStream) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let end = loop {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD {
            return client.write_all(b"HTTP/1.1 431 Too Large\r\n\r\n").await;
        }
    };
    let Some(target) = connect_target(&head).map(str::to_owned) else {
        return client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
    };
    // One blocking lookup inline (nsswitch: /etc/hosts first on Debian).
    let addr = target.to_socket_addrs().ok().and_then(|mut a| a.next());
    let Some(addr) = addr else {
        return client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
    };
    // A bench helper: it never dials off this machine.
    if !addr.ip().is_loopback() {
        return client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
    }
    let mut upstream = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(_) => return client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await,
    };
    upstream.set_nodelay(true)?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    // Bytes the client sent after the head go first.
    if end < head.len() {
        upstream.write_all(&head[end..]).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(listen) = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
    else {
        // Run by `cargo bench`: nothing to measure on its own.
        return;
    };
    let addr: SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("floor: --listen {listen}: {e}");
            std::process::exit(2);
        }
    };
    if !addr.ip().is_loopback() {
        eprintln!("floor: --listen {addr}: not a loopback address");
        std::process::exit(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("floor: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    rt.block_on(async move {
        let listener = match TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("floor: bind {addr}: {e}");
                std::process::exit(1);
            }
        };
        loop {
            match listener.accept().await {
                Ok((conn, _)) => {
                    tokio::spawn(async move {
                        let _ = serve(conn).await;
                    });
                }
                Err(e) => eprintln!("floor: accept: {e}"),
            }
        }
    });
}
