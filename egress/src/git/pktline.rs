//! The receive-pack request head: pkt-lines of `OLD NEW REF`, the first
//! carrying `\0` and the capabilities, a flush, then (with the
//! `push-options` capability) option lines and a flush; the pack follows.
//!
//! The reading is strict where git's is lenient, so that the relay never
//! sees a different list of updates than the origin executes: a ref name
//! must pass `git check-ref-format` as `receive-pack` applies it, ids must
//! be lowercase hex of the push's object format, a `\0` is allowed only on
//! the first command, and what git never sends (an empty `0004` packet, a
//! delim or response-end packet, a signed push, a ref updated twice) is
//! refused rather than guessed at.

use super::{GitError, ObjectId, PktLine, read_pkt};

/// Most ref updates in one push.
pub const MAX_UPDATES: usize = 4096;

/// Most push options in one push.
pub const MAX_PUSH_OPTIONS: usize = 256;

/// Most bytes of command list and push options together (1 MiB).
pub const MAX_HEAD_BYTES: usize = 1 << 20;

/// One ref update of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUpdate {
    /// What the client says the ref is now (zero: create).
    pub old: ObjectId,
    /// What it should become (zero: delete).
    pub new: ObjectId,
    /// The full ref name, `refs/heads/main`.
    pub name: String,
}

/// The head of a push request, as read before the pack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushHead {
    /// The ref updates, in order.
    pub updates: Vec<RefUpdate>,
    /// The capabilities of the first command (`report-status`, `side-band-64k`, …).
    pub capabilities: Vec<String>,
    /// The push options (`-o`), when the `push-options` capability was sent.
    pub push_options: Vec<String>,
    /// Bytes of the body the head took; the pack starts here.
    pub consumed: usize,
}

impl PushHead {
    /// The object format the capabilities name (`sha1` when none does).
    pub fn object_format(&self) -> &str {
        object_format(&self.capabilities).unwrap_or("sha1")
    }

    /// Whether the client sent capability `name` (bare or as `name=value`).
    pub fn has_capability(&self, name: &str) -> bool {
        has_capability(&self.capabilities, name)
    }
}

/// Whether `caps` holds capability `name`, bare or as `name=value`.
pub(crate) fn has_capability(caps: &[String], name: &str) -> bool {
    caps.iter().any(|c| {
        c == name
            || c.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// The value of the `object-format` capability, if any.
fn object_format(caps: &[String]) -> Option<&str> {
    caps.iter().find_map(|c| c.strip_prefix("object-format="))
}

/// Reads a push head from the start of a receive-pack body. `Ok(None)`:
/// more bytes are needed (within [`MAX_HEAD_BYTES`]); a body that is only
/// a flush (`0000`, git's probe) is a head with no updates.
///
/// Shallow lines (`shallow <id>`, sent before the commands by a shallow
/// clone) are accepted and skipped.
///
/// # Errors
/// A malformed or oversized head.
pub fn parse_push_head(buf: &[u8]) -> Result<Option<PushHead>, GitError> {
    let mut head = PushHead::default();
    let mut pos = 0;
    let mut hex_len = 40;
    let mut seen = std::collections::BTreeSet::new();
    // The command list.
    loop {
        let Some((pkt, next)) = read_head_pkt(buf, pos)? else {
            return Ok(None);
        };
        let line = match pkt {
            PktLine::Flush => {
                pos = next;
                break;
            }
            PktLine::Data(line) => line,
        };
        let at = pos;
        pos = next;
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if let Some(id) = line.strip_prefix(b"shallow ") {
            if !head.updates.is_empty() {
                return Err(cmd_err(at, "a shallow line after the commands"));
            }
            if !id.is_empty() && ObjectId::parse(ascii(id, at)?).is_some() {
                continue;
            }
            return Err(cmd_err(at, "a shallow line without an object id"));
        }
        if line.starts_with(b"push-cert") {
            return Err(cmd_err(at, "signed pushes (push-cert) are not supported"));
        }
        let first = head.updates.is_empty();
        let command = match line.iter().position(|&b| b == 0) {
            Some(nul) if first => {
                let (command, caps) = line.split_at(nul);
                let caps = caps.get(1..).unwrap_or_default();
                if caps.contains(&0) {
                    return Err(cmd_err(at, "a second NUL in the capabilities"));
                }
                head.capabilities = ascii(caps, at)?
                    .split(' ')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect();
                hex_len = match object_format(&head.capabilities) {
                    None | Some("sha1") => 40,
                    Some("sha256") => 64,
                    Some(other) => {
                        return Err(cmd_err(at, &format!("unknown object-format {other:?}")));
                    }
                };
                if head
                    .capabilities
                    .iter()
                    .filter(|c| c.starts_with("object-format="))
                    .count()
                    > 1
                {
                    return Err(cmd_err(at, "object-format given twice"));
                }
                command
            }
            Some(_) => return Err(cmd_err(at, "capabilities after the first command")),
            None => line,
        };
        if head.updates.len() >= MAX_UPDATES {
            return Err(GitError::TooLarge("more than MAX_UPDATES ref updates"));
        }
        let update = parse_command(command, hex_len, at)?;
        if !seen.insert(update.name.clone()) {
            return Err(cmd_err(at, &format!("ref {} updated twice", update.name)));
        }
        head.updates.push(update);
    }
    // The push options.
    if !head.updates.is_empty() && head.has_capability("push-options") {
        loop {
            let Some((pkt, next)) = read_head_pkt(buf, pos)? else {
                return Ok(None);
            };
            let at = pos;
            pos = next;
            let option = match pkt {
                PktLine::Flush => break,
                PktLine::Data(option) => option,
            };
            if head.push_options.len() >= MAX_PUSH_OPTIONS {
                return Err(GitError::TooLarge(
                    "more than MAX_PUSH_OPTIONS push options",
                ));
            }
            let option = option.strip_suffix(b"\n").unwrap_or(option);
            if option.iter().any(|&b| b == 0 || b == b'\n') {
                return Err(cmd_err(at, "a push option with a NUL or a newline"));
            }
            let option = std::str::from_utf8(option)
                .map_err(|_| cmd_err(at, "a push option that is not UTF-8"))?;
            head.push_options.push(option.to_owned());
        }
    }
    head.consumed = pos;
    Ok(Some(head))
}

/// The next pkt-line of the head, within [`MAX_HEAD_BYTES`]; `None`: more
/// bytes are needed.
fn read_head_pkt(buf: &[u8], pos: usize) -> Result<Option<(PktLine<'_>, usize)>, GitError> {
    let window = buf.get(..buf.len().min(MAX_HEAD_BYTES)).unwrap_or_default();
    match read_pkt(window, pos)? {
        Some((PktLine::Data([]), _)) => Err(GitError::Command(format!(
            "an empty pkt-line (0004) at byte {pos}"
        ))),
        Some(found) => Ok(Some(found)),
        None if buf.len() >= MAX_HEAD_BYTES => {
            Err(GitError::TooLarge("a push head over MAX_HEAD_BYTES"))
        }
        None => Ok(None),
    }
}

fn cmd_err(at: usize, what: &str) -> GitError {
    GitError::Command(format!("{what} (pkt-line at byte {at})"))
}

fn ascii(bytes: &[u8], at: usize) -> Result<&str, GitError> {
    match std::str::from_utf8(bytes) {
        Ok(s) if s.is_ascii() => Ok(s),
        _ => Err(cmd_err(at, "non-ASCII bytes")),
    }
}

/// `OLD NEW REF`, ids of `hex_len` lowercase hex digits.
fn parse_command(command: &[u8], hex_len: usize, at: usize) -> Result<RefUpdate, GitError> {
    let id = |range: std::ops::Range<usize>| -> Option<ObjectId> {
        let hex = std::str::from_utf8(command.get(range)?).ok()?;
        ObjectId::parse(hex).filter(|id| id.as_str().len() == hex_len)
    };
    let old = id(0..hex_len);
    let new = id(hex_len + 1..2 * hex_len + 1);
    let spaces = command.get(hex_len) == Some(&b' ') && command.get(2 * hex_len + 1) == Some(&b' ');
    let (Some(old), Some(new), true) = (old, new, spaces) else {
        return Err(cmd_err(
            at,
            &format!("a command that is not `OLD NEW REF` with {hex_len}-digit lowercase ids"),
        ));
    };
    let name = command.get(2 * hex_len + 2..).unwrap_or_default();
    let name =
        std::str::from_utf8(name).map_err(|_| cmd_err(at, "a ref name that is not UTF-8"))?;
    if let Err(why) = check_push_ref(name) {
        return Err(cmd_err(
            at,
            &format!("ref name {:?} {why}", name.escape_debug().to_string()),
        ));
    }
    Ok(RefUpdate {
        old,
        new,
        name: name.to_owned(),
    })
}

/// `git check-ref-format` as `receive-pack` applies it to a pushed ref:
/// `refs/` then at least two components (`refs/heads/main`, not
/// `refs/main`), none empty, starting with `.` or ending with `.lock`; no
/// `..`, `@{`, control byte, space, `~ ^ : ? * [ \`; not ending in `/` or
/// `.`. The name's bytes are limited only by the pkt-line.
pub fn check_push_ref(name: &str) -> Result<(), &'static str> {
    let Some(rest) = name.strip_prefix("refs/") else {
        return Err("does not start with refs/");
    };
    if name.contains("..") {
        return Err("contains `..`");
    }
    if name.contains("@{") {
        return Err("contains `@{`");
    }
    if name.ends_with('.') {
        return Err("ends with `.`");
    }
    if name
        .bytes()
        .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
    {
        return Err("contains a control byte, a space or one of ~ ^ : ? * [ \\");
    }
    let mut components = 0;
    for component in rest.split('/') {
        if component.is_empty() {
            return Err("has an empty component (`//` or a trailing `/`)");
        }
        if component.starts_with('.') {
            return Err("has a component starting with `.`");
        }
        if component.ends_with(".lock") {
            return Err("has a component ending with `.lock`");
        }
        components += 1;
    }
    if components < 2 {
        return Err("has one level below refs/ (git refuses `refs/NAME`)");
    }
    Ok(())
}
