//! A tiny HTTP/1.1 server for the fake providers of the agent suite:
//! loopback only, one thread per connection, one request per connection
//! (`connection: close`), request bodies by `content-length` or chunked,
//! response bodies written as given (an SSE stream is a list of events).
//! Every request is kept ([`Fake::seen`]) so that a test can assert what
//! reached the upstream (the real key, the paths).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `POST`.
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Seen {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A response: status, headers, body chunks (each written and flushed in
/// turn, so an SSE stream arrives event by event).
#[derive(Clone, Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers other than `content-length` and `connection`.
    pub headers: Vec<(String, String)>,
    /// The body, chunk by chunk.
    pub chunks: Vec<Vec<u8>>,
}

impl Reply {
    /// A JSON body.
    pub fn json(status: u16, v: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![v.to_string().into_bytes()],
        }
    }

    /// An SSE stream: `(event name or "", data JSON)` pairs; an empty event
    /// name writes a `data:`-only event (OpenAI Chat Completions style).
    pub fn sse(events: &[(&str, serde_json::Value)]) -> Reply {
        let chunks = events
            .iter()
            .map(|(name, data)| {
                let mut s = String::new();
                if !name.is_empty() {
                    s.push_str(&format!("event: {name}\n"));
                }
                s.push_str(&format!("data: {data}\n\n"));
                s.into_bytes()
            })
            .collect();
        Reply {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            chunks,
        }
    }

    /// A raw SSE line appended as its own chunk (`data: [DONE]\n\n`).
    pub fn then_raw(mut self, raw: &str) -> Reply {
        self.chunks.push(raw.as_bytes().to_vec());
        self
    }
}

type Handler = dyn Fn(&Seen, &[Seen]) -> Reply + Send + Sync;

/// A running fake: its address and what it saw.
pub struct Fake {
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    /// Serve `handler` on a fresh loopback port. The handler gets the
    /// request and the requests seen before it.
    pub fn start(handler: impl Fn(&Seen, &[Seen]) -> Reply + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let s = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (s, h) = (s.clone(), handler.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &s, &*h);
                });
            }
        });
        Fake { addr, seen }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, handler: &Handler) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if n == 0 {
                let mut end = String::new();
                r.read_line(&mut end)?;
                break;
            }
            let mut chunk = vec![0; n];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n.min(64 << 20), 0);
        r.read_exact(&mut body)?;
    }
    let req = Seen {
        method,
        path,
        headers,
        body,
    };
    let before = seen.lock().map(|v| v.clone()).unwrap_or_default();
    let reply = handler(&req, &before);
    if let Ok(mut v) = seen.lock() {
        v.push(req);
    }
    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("transfer-encoding: chunked\r\n\r\n");
    w.write_all(head.as_bytes())?;
    for c in &reply.chunks {
        if c.is_empty() {
            continue;
        }
        w.write_all(format!("{:x}\r\n", c.len()).as_bytes())?;
        w.write_all(c)?;
        w.write_all(b"\r\n")?;
        w.flush()?;
    }
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}
