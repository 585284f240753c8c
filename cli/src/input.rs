//! Bounded reads of every file the CLI is given: policies, workflows,
//! events, keys, anchors, marks, sessions, certificates and journals.
//!
//! Every input is opened with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (so a FIFO
//! without a writer cannot block the open and a terminal cannot become the
//! controlling one), checked with `fstat` on the opened descriptor (not the
//! path, so nothing can be swapped in between), and refused unless it is a
//! regular file: directories, FIFOs, sockets and devices are errors. Whole
//! files are read through `Read::take(limit + 1)` and refused over their
//! kind's limit, so `/dev/zero` or an endless writer never fills memory.
//! Journals are not read whole: [`open`] hands the descriptor to a streaming
//! reader whose lines are bounded by `palisade_evidence::MAX_LINE_LEN`.
//! Standard input is read only by `palisade check -` ([`read_stdin`], with
//! the same limit); everywhere else `-` is a file named `-`.
//!
//! Error messages name the kind, the file and the limit, and start with a
//! stable code: `input_unreadable`, `input_not_regular`, `input_too_large`
//! or `input_not_utf8`.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{BufRead, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// What an input file is; each kind has its own size limit (documented in
/// `docs/journal.md`, "Input limits").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The host policy `palisade.toml` (the parser's own 1 MiB budget).
    Policy,
    /// One file of a workflow or of a `.paseo` bundle. The YAML parser
    /// refuses files over its own 1 MiB budget with the `file_too_large`
    /// diagnostic; this larger read limit only bounds memory, so `check`
    /// still reports that diagnostic for files up to the limit.
    Workflow,
    /// A whole `.paseo` bundle, all files together.
    Bundle,
    /// An event JSON file (`explain --event`).
    Event,
    /// A journal key file.
    Key,
    /// A journal anchor file.
    Anchor,
    /// The marks file of `mark-untrusted`.
    Marks,
    /// A session file (`decide --session`).
    Session,
    /// A PEM certificate bundle (`--upstream-ca`, `--relay-ca`).
    Certificates,
    /// A PEM private key (`evidence.tls_key`).
    PrivateKey,
    /// A journal: streamed, never read whole; only its lines are bounded.
    Journal,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

impl Kind {
    /// The kind as a user reads it.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Policy => "policy file",
            Self::Workflow => "workflow file",
            Self::Bundle => "workflow bundle",
            Self::Event => "event file",
            Self::Key => "key file",
            Self::Anchor => "anchor file",
            Self::Marks => "marks file",
            Self::Session => "session file",
            Self::Certificates => "certificate file",
            Self::PrivateKey => "private key file",
            Self::Journal => "journal",
        }
    }

    /// The most bytes read from one input of this kind; for a journal, the
    /// longest line.
    pub(crate) const fn limit(self) -> u64 {
        match self {
            // `palisade_schema::host_policy::MAX_POLICY_BYTES`.
            Self::Policy => 1 << 20,
            Self::Workflow => 4 * MIB,
            Self::Event | Self::Marks | Self::Certificates => MIB,
            Self::Bundle | Self::Session => 16 * MIB,
            Self::Key | Self::Anchor => 4 * KIB,
            Self::PrivateKey => 64 * KIB,
            Self::Journal => palisade_evidence::MAX_LINE_LEN as u64,
        }
    }

    /// The limit in words, for error messages.
    fn limit_words(self) -> String {
        match self {
            Self::Journal => format!("streamed, lines of at most {}", size(self.limit())),
            _ => format!("at most {}", size(self.limit())),
        }
    }
}

/// `n` bytes in the largest binary unit that divides it.
pub(crate) fn size(n: u64) -> String {
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// An opened input: a regular file, checked on its descriptor.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The open file (blocking again, positioned at the start).
    pub(crate) file: File,
    /// Its `fstat`.
    pub(crate) meta: Metadata,
}

/// How [`open_with`] treats a symbolic link as the last component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Links {
    /// Follow it (files the user names on the command line).
    Follow,
    /// Refuse it (files found inside a `.paseo` bundle).
    Refuse,
}

/// Opens an input of `kind`, following links; see [`open_with`].
pub(crate) fn open(path: &Path, kind: Kind) -> Result<Opened, String> {
    open_with(path, kind, Links::Follow)
}

/// Opens an input of `kind` without blocking and refuses anything but a
/// regular file.
///
/// # Errors
/// `input_unreadable` when the open or `fstat` fails (`NotFound` is in the
/// message; use [`read_optional`] when a missing file is allowed), and
/// `input_not_regular` for a directory, FIFO, socket, device or (with
/// [`Links::Refuse`]) a symbolic link.
pub(crate) fn open_with(path: &Path, kind: Kind, links: Links) -> Result<Opened, String> {
    open_raw(path, kind, links).map_err(|e| match e {
        OpenError::Io(e) => unreadable(path, kind, &e),
        OpenError::Refused(msg) => msg,
    })
}

enum OpenError {
    Io(std::io::Error),
    Refused(String),
}

fn open_raw(path: &Path, kind: Kind, links: Links) -> Result<Opened, OpenError> {
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    // std adds O_CLOEXEC to every open.
    let file = match OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && links == Links::Refuse => {
            return Err(OpenError::Refused(not_regular(
                path,
                kind,
                "a symbolic link",
            )));
        }
        Err(e) => return Err(OpenError::Io(e)),
    };
    let meta = file.metadata().map_err(OpenError::Io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else {
            "not a regular file"
        };
        return Err(OpenError::Refused(not_regular(path, kind, what)));
    }
    // Reads of the regular file block as usual from here on.
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(|e| OpenError::Io(e.into()))?;
    Ok(Opened { file, meta })
}

/// Reads the whole of an opened input into `buf` (which it clears), at most
/// `kind`'s limit. Key files are read into a caller's zeroizing buffer
/// preallocated to the limit, so no copy is left behind by a reallocation.
///
/// # Errors
/// `input_unreadable` on a read error, `input_too_large` over the limit.
pub(crate) fn read_into(
    opened: &Opened,
    path: &Path,
    kind: Kind,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let limit = kind.limit();
    buf.clear();
    let hint = opened.meta.len().min(limit).saturating_add(1);
    buf.reserve(usize::try_from(hint).unwrap_or(0));
    (&opened.file)
        .take(limit.saturating_add(1))
        .read_to_end(buf)
        .map_err(|e| unreadable(path, kind, &e))?;
    if buf.len() as u64 > limit {
        return Err(format!(
            "input_too_large: {} `{}` is larger than the {} limit for a {}",
            kind.name(),
            path.display(),
            size(limit),
            kind.name()
        ));
    }
    Ok(())
}

/// Reads a secret input of `kind` (a key) into a zeroizing buffer
/// preallocated to the limit (no reallocation leaves key bytes behind),
/// refusing a file group or others can read: the mode of the opened file,
/// not of whatever the path names later. `what` names it in the error,
/// which never holds the content.
pub(crate) fn read_private(
    path: &Path,
    kind: Kind,
    what: &str,
) -> Result<zeroize::Zeroizing<Vec<u8>>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let opened = open(path, kind)?;
    let mode = opened.meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{what} {} is accessible by other users (mode {mode:o}); run chmod 600",
            path.display()
        ));
    }
    let cap = usize::try_from(kind.limit()).unwrap_or(0).saturating_add(1);
    let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(cap));
    read_into(&opened, path, kind, &mut bytes)?;
    Ok(bytes)
}

/// Reads a PEM certificate file (`--upstream-ca`, `--relay-ca`,
/// `evidence.tls_ca`, `evidence.tls_cert`): its certificates in order.
///
/// # Errors
/// The read's, a PEM block that does not decode, or no certificate.
pub(crate) fn read_certificates(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let pem = read(path, Kind::Certificates)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", path.display()));
    }
    Ok(certs)
}

/// Reads a whole input of `kind`.
pub(crate) fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, String> {
    read_with(path, kind, Links::Follow)
}

/// Reads a whole input of `kind`, treating links as `links` says.
pub(crate) fn read_with(path: &Path, kind: Kind, links: Links) -> Result<Vec<u8>, String> {
    let opened = open_with(path, kind, links)?;
    let mut buf = Vec::new();
    read_into(&opened, path, kind, &mut buf)?;
    Ok(buf)
}

/// Reads standard input whole, at most `kind`'s limit (`palisade check -`).
/// Standard input is read only there; everywhere else `-` is a file.
///
/// # Errors
/// `input_unreadable` on a read error, `input_too_large` over the limit.
pub(crate) fn read_stdin(kind: Kind) -> Result<Vec<u8>, String> {
    let limit = kind.limit();
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| {
            format!(
                "input_unreadable: cannot read {} from <stdin>: {e}",
                kind.name()
            )
        })?;
    if buf.len() as u64 > limit {
        return Err(format!(
            "input_too_large: {} `<stdin>` is larger than the {} limit for a {}",
            kind.name(),
            size(limit),
            kind.name()
        ));
    }
    Ok(buf)
}

/// Reads a whole input of `kind` as UTF-8.
pub(crate) fn read_text(path: &Path, kind: Kind) -> Result<String, String> {
    utf8(read(path, kind)?, path, kind)
}

/// Reads a whole input of `kind` as UTF-8; a missing file is `None`.
pub(crate) fn read_optional(path: &Path, kind: Kind) -> Result<Option<String>, String> {
    let opened = match open_raw(path, kind, Links::Follow) {
        Ok(o) => o,
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(OpenError::Io(e)) => return Err(unreadable(path, kind, &e)),
        Err(OpenError::Refused(msg)) => return Err(msg),
    };
    let mut buf = Vec::new();
    read_into(&opened, path, kind, &mut buf)?;
    utf8(buf, path, kind).map(Some)
}

/// Bytes as UTF-8, or `input_not_utf8`.
fn utf8(bytes: Vec<u8>, path: &Path, kind: Kind) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "input_not_utf8: {} `{}` is not UTF-8 (byte {})",
            kind.name(),
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line ended by `\n` (the newline is not kept).
    Complete,
    /// The last bytes of the input, without a final newline.
    Unterminated,
    /// The line is longer than the limit; `buf` holds its first bytes.
    TooLong,
    /// Nothing is left.
    End,
}

/// Reads one line of at most `max` bytes (without its newline) into `buf`
/// (cleared first), never buffering more than `max + 1` bytes.
pub(crate) fn read_line<R: BufRead>(
    reader: &mut R,
    max: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    buf.clear();
    let n = reader.take(max.saturating_add(1)).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Line::Complete);
    }
    if buf.len() as u64 > max {
        return Ok(Line::TooLong);
    }
    Ok(Line::Unterminated)
}

fn unreadable(path: &Path, kind: Kind, e: &std::io::Error) -> String {
    format!(
        "input_unreadable: cannot read {} `{}`: {e}",
        kind.name(),
        path.display()
    )
}

fn not_regular(path: &Path, kind: Kind, what: &str) -> String {
    format!(
        "input_not_regular: {} `{}` is {what}, not a regular file (palisade reads a {} only from a regular file, {})",
        kind.name(),
        path.display(),
        kind.name(),
        kind.limit_words()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_in_the_largest_exact_unit() {
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(Kind::Journal.limit()), "1032 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }

    #[test]
    fn the_limits_match_the_parsers_budgets() {
        assert_eq!(
            Kind::Policy.limit(),
            palisade_schema::host_policy::MAX_POLICY_BYTES as u64
        );
        assert_eq!(
            Kind::Journal.limit(),
            palisade_evidence::MAX_LINE_LEN as u64
        );
    }

    #[test]
    fn lines_are_bounded_and_classified() {
        let mut buf = Vec::new();
        let mut r = std::io::Cursor::new(b"ab\nabcdef\nxyz".to_vec());
        assert_eq!(read_line(&mut r, 4, &mut buf).unwrap(), Line::Complete);
        assert_eq!(buf, b"ab");
        assert_eq!(read_line(&mut r, 4, &mut buf).unwrap(), Line::TooLong);
        assert_eq!(buf.len(), 5);
        let mut r = std::io::Cursor::new(b"xyz".to_vec());
        assert_eq!(read_line(&mut r, 4, &mut buf).unwrap(), Line::Unterminated);
        assert_eq!(buf, b"xyz");
        assert_eq!(read_line(&mut r, 4, &mut buf).unwrap(), Line::End);
    }
}
