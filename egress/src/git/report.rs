//! `report-status`: what the relay answers when it refuses a push (so git
//! prints `! [remote rejected] main -> main (refused by palisade: <rule>)`),
//! and what it reads from the origin's answer to record each ref's result.

use super::GitError;

/// The outcome of one ref update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefStatus {
    /// `ok REF`.
    Ok,
    /// `ng REF REASON`.
    Ng(String),
}

/// The body of a `application/x-git-receive-pack-result` response that
/// reports `unpack ok` and one line per ref, wrapped in side band 1 when
/// the client asked for `side-band-64k` (or `side-band`), with `messages`
/// on band 2 (git prints them as `remote: …`).
pub fn refusal_body(
    capabilities: &[String],
    refs: &[(String, RefStatus)],
    messages: &[String],
) -> Vec<u8> {
    let _ = (capabilities, refs, messages);
    Vec::new()
}

/// An incremental reader of the origin's receive-pack result (side band
/// demultiplexed when the client asked for it): `unpack` status and one
/// [`RefStatus`] per ref.
#[derive(Debug, Default)]
pub struct ReportReader {
    _private: (),
}

impl ReportReader {
    /// A reader for a push whose client sent `capabilities`.
    pub fn new(capabilities: &[String]) -> Self {
        let _ = capabilities;
        Self::default()
    }

    /// Feeds response bytes (the relay passes them on unchanged).
    ///
    /// # Errors
    /// Never for what a real origin sends; malformed input stops the reading
    /// (the relay then records each ref as `unknown`).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        let _ = bytes;
        Ok(())
    }

    /// The status of each ref seen so far, in order, and the `unpack` line.
    pub fn results(&self) -> (Option<String>, Vec<(String, RefStatus)>) {
        (None, Vec::new())
    }
}
