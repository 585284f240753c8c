//! Journal keys (zeroized on drop, never printed) and the `Secret` type that
//! keeps credential values out of records.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// HMAC-SHA256, the only MAC the journal uses.
pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Length in bytes of a journal key and of every MAC.
pub const KEY_LEN: usize = 32;

/// The label mixed into every key evolution: `k(e+1) = HMAC(k(e), label)`.
pub const EVOLVE_LABEL: &[u8] = b"palisade/evolve";

/// The first word of the text form of a key.
const KEY_TEXT_MAGIC: &str = "palisade-journal-key";

/// A sealing key at a given epoch.
///
/// The key of epoch `e + 1` is `HMAC-SHA256(k(e), "palisade/evolve")`, so
/// whoever holds the key of epoch `e` can derive every later key but no
/// earlier one. The verifier needs the key of epoch 0 (the *initial key*),
/// which is meant to live off the host.
///
/// The bytes are zeroized on drop, never printed by `Debug` and the type has
/// no `Serialize`: the only way to get them out is [`JournalKey::expose_text`].
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct JournalKey {
    bytes: [u8; KEY_LEN],
    #[zeroize(skip)]
    epoch: u64,
}

impl JournalKey {
    /// Generates a fresh initial key (epoch 0) from the operating system's
    /// random number generator.
    ///
    /// # Errors
    /// Fails when the operating system has no randomness to give.
    pub fn generate() -> Result<Self, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|err| KeyError::Random(err.to_string()))?;
        Ok(Self { bytes, epoch: 0 })
    }

    /// Builds a key from raw bytes at the given epoch.
    #[must_use]
    pub fn from_bytes(bytes: [u8; KEY_LEN], epoch: u64) -> Self {
        Self { bytes, epoch }
    }

    /// The epoch this key seals.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Replaces this key by the key of the next epoch; the old bytes are
    /// overwritten in place.
    pub fn evolve(&mut self) {
        let next = derive_next(&self.bytes);
        self.bytes.copy_from_slice(next.as_slice());
        self.epoch = self.epoch.saturating_add(1);
    }

    /// The key of `epoch`, derived forward from this one, or `None` when
    /// `epoch` is earlier than this key's epoch (forward security: earlier
    /// keys cannot be derived).
    #[must_use]
    pub fn derive(&self, epoch: u64) -> Option<Self> {
        if epoch < self.epoch {
            return None;
        }
        let mut key = self.clone();
        while key.epoch < epoch {
            key.evolve();
        }
        Some(key)
    }

    /// The text form `palisade-journal-key v1 <epoch> <64 hex digits>`, for
    /// writing a key file. The returned string is zeroized when dropped.
    #[must_use]
    pub fn expose_text(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::with_capacity(100));
        text.push_str(KEY_TEXT_MAGIC);
        text.push_str(" v1 ");
        text.push_str(&self.epoch.to_string());
        text.push(' ');
        let hex = Zeroizing::new(hex::encode(self.bytes));
        text.push_str(&hex);
        text.push('\n');
        text
    }

    /// Parses the text form written by [`JournalKey::expose_text`]
    /// (surrounding whitespace is ignored).
    ///
    /// # Errors
    /// Fails on anything but exactly that form; the error never contains the
    /// key material.
    pub fn from_text(text: &str) -> Result<Self, KeyError> {
        let mut words = text.split_ascii_whitespace();
        if words.next() != Some(KEY_TEXT_MAGIC) {
            return Err(KeyError::Format(
                "it does not start with `palisade-journal-key`",
            ));
        }
        if words.next() != Some("v1") {
            return Err(KeyError::Format("unsupported key version (expected `v1`)"));
        }
        let epoch = words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .ok_or(KeyError::Format("the epoch is not a number"))?;
        let hex_word = words.next().ok_or(KeyError::Format("the key is missing"))?;
        let mut bytes = [0u8; KEY_LEN];
        if hex_word.len() != 2 * KEY_LEN || hex::decode_to_slice(hex_word, &mut bytes).is_err() {
            bytes.zeroize();
            return Err(KeyError::Format("the key is not 64 hex digits"));
        }
        if words.next().is_some() {
            bytes.zeroize();
            return Err(KeyError::Format("unexpected text after the key"));
        }
        Ok(Self { bytes, epoch })
    }

    /// A keyed MAC state for this key, to be cloned per record.
    pub(crate) fn mac_state(&self) -> MacState {
        MacState(keyed(&self.bytes))
    }
}

impl fmt::Debug for JournalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalKey")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// Errors from generating or reading a key. Messages never contain key bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The operating system's random number generator failed.
    #[error("cannot generate a key: {0}")]
    Random(String),
    /// The key text is malformed.
    #[error("not a palisade journal key: {0}")]
    Format(&'static str),
}

/// A credential value (token, password, API key).
///
/// `Secret` has no `Serialize`, no `Display` and a redacting `Debug`, so a
/// record body, which must be `Serialize`, cannot contain one:
///
/// ```compile_fail
/// use palisade_evidence::{Body, Secret};
/// #[derive(serde::Serialize)]
/// struct Leaky {
///     token: Secret,
/// }
/// let leaky = Leaky { token: Secret::new("hunter2".to_owned()) };
/// let _ = Body::from_serialize(&leaky);
/// ```
///
/// The same struct with a plain field compiles (the positive control):
///
/// ```
/// use palisade_evidence::Body;
/// #[derive(serde::Serialize)]
/// struct Fine {
///     token_id: String,
/// }
/// let fine = Fine { token_id: "relay-7".to_owned() };
/// assert!(Body::from_serialize(&fine).is_ok());
/// ```
///
/// The value is zeroized on drop and only reachable through
/// [`Secret::expose`].
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential value.
    #[must_use]
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The credential value, for the one place that must send it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A keyed HMAC-SHA256 state: the inner and outer pads derived from a
/// journal key, which is all an attacker needs to forge records of that
/// epoch.
///
/// `hmac` offers no zeroization, so this wrapper overwrites the state with
/// that of the all-zero key when it is dropped (which includes being replaced
/// at an epoch change). What it cannot reach: the short-lived copy made per
/// record inside [`MacState::mac`] and whatever the compiler spills to the
/// stack while hashing.
#[derive(Clone)]
pub(crate) struct MacState(HmacSha256);

impl MacState {
    /// `HMAC(key, a ‖ b)`.
    pub(crate) fn mac(&self, a: &[u8], b: &[u8]) -> [u8; KEY_LEN] {
        let mut mac = self.0.clone();
        mac.update(a);
        mac.update(b);
        mac.finalize().into_bytes().into()
    }

    /// Replaces the key-derived state with that of the all-zero key.
    fn wipe(&mut self) {
        self.0 = keyed(&[0u8; KEY_LEN]);
        // Keep the overwrite: the state is not read again before it is freed,
        // and an optimiser may drop a store nobody reads.
        std::hint::black_box(&mut self.0);
    }
}

impl Drop for MacState {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl fmt::Debug for MacState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacState(<redacted>)")
    }
}

/// `HMAC-SHA256(key, EVOLVE_LABEL)`.
fn derive_next(key: &[u8; KEY_LEN]) -> Zeroizing<[u8; KEY_LEN]> {
    let mut mac = keyed(key);
    mac.update(EVOLVE_LABEL);
    let mut out = Zeroizing::new([0u8; KEY_LEN]);
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

fn keyed(key: &[u8; KEY_LEN]) -> HmacSha256 {
    // INVARIANT: HMAC accepts keys of any length, so this never fails; the
    // fallback branch only exists to keep the library free of panics.
    match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => <HmacSha256 as hmac::digest::KeyInit>::new(&[0u8; 64].into()),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_wiped_mac_state_no_longer_holds_the_key() {
        let key = JournalKey::from_bytes([7u8; KEY_LEN], 0);
        let zero = MacState(keyed(&[0u8; KEY_LEN]));
        let mut state = key.mac_state();
        // Control: before the wipe, the state MACs with the journal key.
        assert_ne!(state.mac(b"a", b"b"), zero.mac(b"a", b"b"));
        assert_eq!(state.mac(b"a", b"b"), key.mac_state().mac(b"a", b"b"));
        state.wipe();
        assert_eq!(state.mac(b"a", b"b"), zero.mac(b"a", b"b"));
    }
    use super::*;

    #[test]
    fn text_round_trip_keeps_bytes_and_epoch() {
        let key = JournalKey::from_bytes([7u8; KEY_LEN], 3);
        let text = key.expose_text();
        let back = JournalKey::from_text(&text).unwrap();
        assert_eq!(back.epoch(), 3);
        assert_eq!(back.bytes, [7u8; KEY_LEN]);
    }

    #[test]
    fn malformed_key_text_is_rejected_without_echoing_it() {
        let bad = format!("palisade-journal-key v1 0 {}", "zz".repeat(32));
        let err = JournalKey::from_text(&bad).unwrap_err().to_string();
        assert!(!err.contains("zz"), "{err}");
        assert!(JournalKey::from_text("palisade-journal-key v2 0 00").is_err());
        assert!(
            JournalKey::from_text(&format!("palisade-journal-key v1 0 {}", "ab".repeat(32)))
                .is_ok()
        );
    }

    #[test]
    fn evolution_is_one_way_and_deterministic() {
        let k0 = JournalKey::from_bytes([1u8; KEY_LEN], 0);
        let k2 = k0.derive(2).unwrap();
        let mut manual = k0.clone();
        manual.evolve();
        manual.evolve();
        assert_eq!(k2.bytes, manual.bytes);
        assert_eq!(k2.epoch(), 2);
        assert_ne!(k2.bytes, k0.bytes);
        assert!(k2.derive(1).is_none());
        assert!(k2.derive(2).is_some());
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let key = JournalKey::from_bytes([0xab; KEY_LEN], 0);
        let shown = format!("{key:?}");
        assert!(!shown.contains("ab, ") && !shown.contains("171"), "{shown}");
        let marker: String = "TERCES_KRAM".chars().rev().collect();
        let secret = Secret::new(marker.clone());
        assert!(!format!("{secret:?}").contains(&marker));
        assert_eq!(secret.expose(), marker);
    }
}
