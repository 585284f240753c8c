//! The session control channel: a tiny, versioned, line-delimited JSON
//! protocol over a Unix socket (or a loopback TCP port bridged into a
//! sandbox), with a tokio server and a blocking client.
//!
//! A governed worker uses it to report taint sources (web results, inbox
//! reads, MCP results, marked files), to ask before outward actions
//! (`git.push`, `github.post`, `mail.send`, …) and to read its session
//! state. The host uses a second, private endpoint to list and settle the
//! actions that wait for approval (`palisade approve`) and to take a
//! checkpoint of the staged writes (`palisade ctl checkpoint`).
//!
//! The server does not decide anything itself: a [`ControlBackend`] (the
//! session) answers from the host policy and the shared taint state, and
//! records every event. An `ask` answer blocks the worker's request until
//! the host approves or denies it, or until the approval timeout, which
//! denies.
//!
//! ```text
//! → {"v":1,"op":"taint","source":"web","detail":"https://example.org/x"}
//! ← {"v":1,"ok":true,"state":{"session":"…","tainted":true,…}}
//! → {"v":1,"op":"outward","kind":"git.push","target":"github.com/acme/app:refs/heads/main"}
//! ← {"v":1,"ok":true,"outward":{"ticket":2,"decision":"allow","policy":"ask","approval":"approved",…}}
//! ```

mod client;
mod protocol;
mod server;

pub use client::{CONTROL_ENV, ClientError, ControlAddr, ControlClient};
pub use protocol::{
    Approval, AskAnswer, CheckpointRefusal, CheckpointSummary, MAX_CHECKPOINT_REFUSED,
    MAX_FIELD_BYTES, MAX_LINE_BYTES, OutwardAction, OutwardAnswer, OutwardResult, PROTOCOL_VERSION,
    PendingAction, ProtocolError, Request, Response, SessionView, TaintEntry, TaintKind, WireError,
    parse_request,
};
pub use server::{
    ControlBackend, ControlConfig, ControlError, ControlListener, ControlServer, Endpoint,
    PolicyAnswer,
};

#[cfg(any(fuzzing, feature = "testing"))]
/// Entry points for fuzz targets. Not part of the stable API.
#[doc(hidden)]
pub mod __fuzz {
    /// Feeds arbitrary bytes to the request parser and, when it accepts,
    /// checks that the request survives a round trip.
    pub fn control_request(data: &[u8]) {
        if let Ok(req) = super::parse_request(data) {
            let line = req.to_line();
            let again = super::parse_request(line.trim_end_matches('\n').as_bytes());
            assert_eq!(again.as_ref(), Ok(&req), "round trip changed the request");
        }
        let _ = super::Response::parse(data);
    }
}
