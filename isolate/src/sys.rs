//! Every raw system call of the crate, each wrapped in a small safe function.
//!
//! This is the only module of the workspace allowed to use `unsafe`. Each
//! block carries a `// SAFETY:` comment that says why the call cannot break
//! memory safety. Wrappers return the raw `errno` on failure so that the
//! setup code in the forked children can report it through the error pipe
//! without allocating a richer error.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Result of a raw call: the value or the `errno`.
pub(crate) type SysResult<T> = Result<T, i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

fn check_int(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

fn check_long(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// Which side of a `fork` we are on.
#[derive(Debug)]
pub(crate) enum Forked {
    /// In the parent, with the child's pid.
    Parent(libc::pid_t),
    /// In the child.
    Child,
}

/// `fork(2)` through glibc, which keeps its own locks (malloc) consistent in
/// the child.
pub(crate) fn fork() -> SysResult<Forked> {
    // SAFETY: fork has no memory-safety preconditions; glibc's wrapper runs
    // its atfork handlers so the allocator stays usable in the child. The
    // callers only run setup code and then exec or _exit in the child.
    let pid = unsafe { libc::fork() };
    match pid {
        p if p < 0 => Err(errno()),
        0 => Ok(Forked::Child),
        p => Ok(Forked::Parent(p)),
    }
}

/// `_exit(2)`: leave the child without running the parent's destructors or
/// atexit handlers.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed memory.
    unsafe { libc::_exit(code) }
}

/// `close_range(2)` over `[first, last]`.
pub(crate) fn close_range(first: u32, last: u32) -> SysResult<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: plain syscall with integer arguments; closing descriptors that
    // Rust objects in this (forked, about to exec) process still own is
    // harmless because those objects are never used again.
    check(unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) }).map(|_| ())
}

/// Close every descriptor from 3 up except those in `keep`.
pub(crate) fn close_all_except(keep: &[RawFd]) -> SysResult<()> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter_map(|k| u32::try_from(*k).ok())
        .filter(|k| *k >= 3)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = 3u32;
    for k in keep {
        if k > from {
            close_range(from, k - 1)?;
        }
        from = k.saturating_add(1);
    }
    close_range(from, u32::MAX)
}

/// `dup2(2)`.
pub(crate) fn dup2(old: RawFd, new: RawFd) -> SysResult<()> {
    // SAFETY: integer arguments only.
    check_int(unsafe { libc::dup2(old, new) }).map(|_| ())
}

/// `close(2)` of a raw descriptor.
#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) fn close(fd: RawFd) {
    // SAFETY: integer argument; the caller owns the descriptor and never
    // uses it again.
    unsafe {
        libc::close(fd);
    }
}

/// Write a whole buffer to a raw descriptor, ignoring errors (used to
/// report a setup failure just before `_exit`).
pub(crate) fn write_all(fd: RawFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: `buf` is a valid slice for `buf.len()` bytes.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        buf = buf
            .get(usize::try_from(n).unwrap_or(buf.len())..)
            .unwrap_or(&[]);
    }
}

/// The CPU the calling thread runs on.
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions; -1 is an error.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Install a seccomp filter on the calling thread
/// (`SECCOMP_SET_MODE_FILTER`; `no_new_privs` must already be set).
pub(crate) fn seccomp_install(program: &[libc::sock_filter]) -> SysResult<()> {
    let len = u16::try_from(program.len()).map_err(|_| libc::EINVAL)?;
    if len == 0 {
        return Err(libc::EINVAL);
    }
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `len` valid instructions for the duration of
    // the call; the kernel copies them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &raw const prog,
        )
    };
    if rc != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Reset every catchable signal to its default disposition (the launcher
/// may ignore SIGPIPE, and ignored signals survive `execve`).
pub(crate) fn reset_signals() {
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no memory-safety preconditions.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Clear the `FD_CLOEXEC` flag of a descriptor.
pub(crate) fn clear_cloexec(fd: RawFd) -> SysResult<()> {
    // SAFETY: integer arguments only.
    check_int(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(|_| ())
}

/// `mount_setattr(2)` with `AT_RECURSIVE` on a path: set and clear mount
/// attributes of a whole mount tree.
pub(crate) fn mount_setattr_recursive(path: &CStr, set: u64, clear: u64) -> SysResult<()> {
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a valid NUL-terminated string and `attr` a valid
    // struct whose size we pass; the kernel only reads both.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    })
    .map(|_| ())
}

// The new mount API (`fsopen(2)` and friends), declared here so that the
// crate does not depend on a libc release that exports them.
const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `fsopen(2)`: a filesystem context for `fstype`, close-on-exec.
pub(crate) fn fsopen(fstype: &CStr) -> SysResult<OwnedFd> {
    // SAFETY: `fstype` is a valid NUL-terminated string the kernel only
    // reads; the flags are an integer.
    let fd = check(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    let fd = RawFd::try_from(fd).map_err(|_| libc::EBADF)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fsconfig(2)` `FSCONFIG_SET_STRING`: `key=value` on a filesystem
/// context. A value is passed as is (no escaping of `,` or `:`).
pub(crate) fn fsconfig_string(fs: &OwnedFd, key: &CStr, value: &CStr) -> SysResult<()> {
    // SAFETY: `fs` is an open descriptor; `key` and `value` are valid
    // NUL-terminated strings the kernel only reads; aux is 0 as required.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_SET_STRING,
            key.as_ptr(),
            value.as_ptr(),
            0 as libc::c_int,
        )
    })
    .map(|_| ())
}

/// `fsconfig(2)` `FSCONFIG_SET_FLAG`: a flag option on a filesystem context.
pub(crate) fn fsconfig_flag(fs: &OwnedFd, key: &CStr) -> SysResult<()> {
    // SAFETY: `fs` is an open descriptor; `key` is a valid NUL-terminated
    // string the kernel only reads; value must be NULL and aux 0.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_SET_FLAG,
            key.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0 as libc::c_int,
        )
    })
    .map(|_| ())
}

/// `fsconfig(2)` `FSCONFIG_CMD_CREATE`: create the superblock.
pub(crate) fn fsconfig_create(fs: &OwnedFd) -> SysResult<()> {
    // SAFETY: `fs` is an open descriptor; key and value must be NULL and
    // aux 0 for this command.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0 as libc::c_int,
        )
    })
    .map(|_| ())
}

/// The kernel's messages on a filesystem context (what a failed `fsconfig`
/// said, e.g. `e overlay: ...`), joined by `; `, at most 4 KiB.
pub(crate) fn fs_context_log(fs: &OwnedFd) -> String {
    let mut out = String::new();
    let mut buf = [0u8; 512];
    for _ in 0..8 {
        // SAFETY: `buf` is a valid writable buffer of the length passed.
        let n = unsafe { libc::read(fs.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&String::from_utf8_lossy(buf.get(..n).unwrap_or_default()));
    }
    out
}

/// `fsmount(2)`: a detached mount of a created context, with mount
/// attributes `attrs` (`MOUNT_ATTR_*`), close-on-exec.
pub(crate) fn fsmount(fs: &OwnedFd, attrs: u64) -> SysResult<OwnedFd> {
    let attrs = libc::c_uint::try_from(attrs).map_err(|_| libc::EINVAL)?;
    // SAFETY: integer arguments only; `fs` is an open descriptor.
    let fd =
        check(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })?;
    let fd = RawFd::try_from(fd).map_err(|_| libc::EBADF)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `move_mount(2)` of a detached mount onto `target`.
pub(crate) fn move_mount_to(mnt: &OwnedFd, target: &CStr) -> SysResult<()> {
    // SAFETY: `mnt` is an open mount descriptor; the empty string and
    // `target` are valid NUL-terminated strings the kernel only reads.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })
    .map(|_| ())
}

/// Set the securebits of the calling thread.
pub(crate) fn set_securebits(bits: libc::c_ulong) -> SysResult<()> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) }).map(|_| ())
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (version 3 takes two of them).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `PR_CAP_AMBIENT_CLEAR_ALL`.
pub(crate) fn clear_ambient() -> SysResult<()> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })
    .map(|_| ())
}

/// `PR_CAP_AMBIENT_IS_SET` for one capability.
pub(crate) fn ambient_is_set(cap: u32) -> SysResult<bool> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
            libc::c_ulong::from(cap),
            0,
            0,
        )
    })
    .map(|r| r != 0)
}

/// `PR_CAPBSET_DROP` for one capability (`EINVAL` past the last one).
pub(crate) fn bounding_drop(cap: u32) -> SysResult<()> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) })
        .map(|_| ())
}

/// `PR_CAPBSET_READ` for one capability.
pub(crate) fn bounding_has(cap: u32) -> SysResult<bool> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) })
        .map(|r| r != 0)
}

/// The effective, permitted and inheritable sets of the calling thread,
/// each as 64 bits (`capget`, version 3).
pub(crate) fn capget() -> SysResult<[u64; 3]> {
    let mut hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `hdr` and the two-element `data` array are valid for the
    // version-3 layout the kernel writes.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_capget,
            std::ptr::addr_of_mut!(hdr),
            data.as_mut_ptr(),
        )
    })?;
    let [lo, hi] = data;
    let join = |l: u32, h: u32| u64::from(l) | (u64::from(h) << 32);
    Ok([
        join(lo.effective, hi.effective),
        join(lo.permitted, hi.permitted),
        join(lo.inheritable, hi.inheritable),
    ])
}

/// Empty the effective, permitted and inheritable sets in one `capset`.
pub(crate) fn capset_empty() -> SysResult<()> {
    let mut hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `hdr` and the two-element `data` array are valid for the
    // version-3 layout the kernel reads.
    check_long(unsafe {
        libc::syscall(libc::SYS_capset, std::ptr::addr_of_mut!(hdr), data.as_ptr())
    })
    .map(|_| ())
}

/// Read the securebits of the calling thread.
pub(crate) fn get_securebits() -> SysResult<libc::c_int> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) })
}

/// `PR_GET_SECCOMP`: 0 when unfiltered, 2 in filter mode, `EINVAL` when the
/// kernel lacks seccomp.
pub(crate) fn get_seccomp_mode() -> SysResult<libc::c_int> {
    // SAFETY: prctl with integer arguments only.
    check_int(unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) })
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the
/// kernel's Landlock ABI version.
pub(crate) fn landlock_abi() -> SysResult<i64> {
    // SAFETY: a NULL attribute with size 0 and the VERSION flag is the
    // documented way to query the ABI; nothing is read or written.
    check(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    })
}

/// Bring the loopback interface up in the current network namespace.
pub(crate) fn loopback_up() -> SysResult<()> {
    // SAFETY: socket() with integer arguments; the result is owned below.
    let raw = check_int(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface name and writes the flags
    // into `req`, which is a valid, exclusively borrowed ifreq.
    check_int(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &raw mut req) })?;
    // SAFETY: the union field was just written by the kernel as flags.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags =
        flags | (libc::IFF_UP as libc::c_short) | (libc::IFF_RUNNING as libc::c_short);
    // SAFETY: SIOCSIFFLAGS reads `req`, a valid ifreq.
    check_int(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &raw const req) })?;
    Ok(())
}

/// `ioctl(fd, TIOCSCTTY, 0)`: make the terminal on `fd` the controlling
/// terminal of the calling session leader (which has none yet).
pub(crate) fn set_controlling_tty(fd: RawFd) -> SysResult<()> {
    // SAFETY: integer arguments only; TIOCSCTTY takes an int, not a pointer.
    check_int(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0 as libc::c_int) }).map(|_| ())
}

/// Unlock a pty master (`TIOCSPTLCK` with 0) so that its slave can be
/// opened.
pub(crate) fn pty_unlock(master: RawFd) -> SysResult<()> {
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the pointer, which points at a
    // valid local for the duration of the call.
    check_int(unsafe { libc::ioctl(master, libc::TIOCSPTLCK, &raw const unlock) }).map(|_| ())
}

/// Open the slave of a pty master (`TIOCGPTPEER`) with `flags`
/// (`O_RDWR | O_NOCTTY | O_CLOEXEC`), without a path lookup.
pub(crate) fn pty_peer(master: RawFd, flags: libc::c_int) -> SysResult<OwnedFd> {
    // SAFETY: TIOCGPTPEER takes its flags as an integer argument and returns
    // a new descriptor.
    let fd = check_int(unsafe { libc::ioctl(master, libc::TIOCGPTPEER, flags) })?;
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A terminal's window size (`TIOCGWINSZ`).
pub(crate) fn window_size(fd: RawFd) -> SysResult<libc::winsize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the pointer, which points
    // at a valid, exclusively borrowed local.
    check_int(unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &raw mut ws) })?;
    Ok(ws)
}

/// Set a terminal's window size (`TIOCSWINSZ`); on a pty master the kernel
/// sends SIGWINCH to the slave's foreground process group.
pub(crate) fn set_window_size(fd: RawFd, ws: &libc::winsize) -> SysResult<()> {
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, a valid
    // reference for the duration of the call.
    check_int(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, std::ptr::from_ref(ws)) }).map(|_| ())
}

/// The number of bytes waiting in a descriptor's input queue (`FIONREAD`;
/// on a terminal in canonical mode, the complete lines only).
#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) fn input_pending(fd: RawFd) -> SysResult<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into the pointer, which points at a
    // valid, exclusively borrowed local.
    check_int(unsafe { libc::ioctl(fd, libc::FIONREAD, &raw mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Raw attempts used by the escape suite and `palisade probe`.
///
/// Each function performs one system call that a sandbox must refuse and
/// returns the errno (or `Ok` with the raw return value). Arguments are
/// chosen so that an *allowed* call fails harmlessly (bad descriptors,
/// null pointers), as bubblewrap's `try-syscall.c` does.
/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: a new anonymous session
/// keyring for the calling process, replacing the one inherited from the
/// launcher. The serial of the new keyring.
pub(crate) fn join_new_session_keyring() -> SysResult<libc::c_long> {
    // SAFETY: a NULL name asks for a new anonymous keyring; the kernel reads
    // no memory.
    check(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    })
}

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)`: the serial
/// of the calling process's session keyring, without creating one.
#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) fn session_keyring_id() -> SysResult<libc::c_long> {
    // SAFETY: integer arguments only.
    check(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_GET_KEYRING_ID,
            libc::KEY_SPEC_SESSION_KEYRING,
            0,
        )
    })
}

/// `pidfd_open(2)`: a descriptor that refers to the process `pid` itself
/// (close-on-exec), readable once it has exited, so that it can sit in a
/// caller's `poll`/epoll set and be signalled without a pid-reuse race.
/// `pid` must be an unreaped child of this process, so that it cannot name
/// another process by the time the call runs.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> SysResult<OwnedFd> {
    // SAFETY: integer arguments only; the call returns a new descriptor or
    // -1 with errno.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })?;
    let fd = RawFd::try_from(fd).map_err(|_| libc::EBADF)?;
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pidfd_send_signal(2)`: send `sig` to the process `pidfd` refers to
/// (`ESRCH` once it has been reaped).
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> SysResult<()> {
    // SAFETY: a descriptor borrowed for the call, a signal number, a null
    // `siginfo` (the kernel fills in a plain `kill`'s) and no flags.
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    })
    .map(|_| ())
}

/// Wait, without blocking the runtime, until `pidfd`'s process has ended
/// (the pidfd is readable), through tokio's `AsyncFd`.
#[cfg(feature = "tokio")]
pub(crate) async fn pidfd_ended(pidfd: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;
    // SAFETY: the registered descriptor is borrowed from `pidfd` for the
    // whole life of the `AsyncFd`, which ends when this function returns, so
    // it stays open and names the same pidfd meanwhile.
    let fd = unsafe { AsyncFd::register_with_interest(pidfd.as_fd(), Interest::READABLE) }?;
    loop {
        let mut guard = fd.readable().await?;
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(nix::errno::Errno::EINTR) => guard.clear_ready(),
            Err(e) => return Err(e.into()),
        }
    }
}

// ---- the read observer (`observe.rs`) ----

/// Take ownership of a descriptor the kernel handed over in a fanotify
/// event (the opened file, or the opener's pidfd), so that it is closed
/// exactly once. `fd` must be a descriptor the caller owns and that
/// nothing else will close; a negative `fd` is `None`.
pub(crate) fn adopt_fd(fd: RawFd) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just installed in this process by the kernel for the
    // caller alone (a fanotify event's `fd` or pidfd record); nothing else
    // holds or closes it, so the new `OwnedFd` is its only owner.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ioctl(ns, NS_GET_PARENT)`: the parent of the PID namespace `ns` (a new
/// close-on-exec descriptor); `EPERM` when the parent lies outside the
/// caller's own namespace (the walk reached the caller's level).
pub(crate) fn ns_get_parent(ns: std::os::fd::BorrowedFd<'_>) -> SysResult<OwnedFd> {
    // SAFETY: `ns` is borrowed for the call; `NS_GET_PARENT` takes no
    // argument and returns a new descriptor or -1 with errno.
    let fd = check_int(unsafe { libc::ioctl(ns.as_raw_fd(), libc::NS_GET_PARENT) })?;
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

// ---- staged writes: extended attributes (change set and commit) ----
// nix 0.32 has no xattr calls; these three are what `stage::scan` and
// `stage::commit` need, on descriptors only (never on a path, so never
// through a symlink).

/// `fgetxattr(2)`: the value of `name` on `fd` into `buf`, its length;
/// `ENODATA` when the attribute is absent, `ERANGE` when `buf` is too small.
pub(crate) fn fgetxattr(
    fd: std::os::fd::BorrowedFd<'_>,
    name: &CStr,
    buf: &mut [u8],
) -> SysResult<usize> {
    // SAFETY: `fd` is a borrowed open descriptor, `name` a valid
    // NUL-terminated string, and the kernel writes at most `buf.len()` bytes
    // into `buf`, which is valid for that many bytes.
    let n = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
        )
    };
    check(n as libc::c_long).map(|n| n as usize)
}

/// `flistxattr(2)`: the NUL-separated attribute names of `fd` into `buf`,
/// their total length (`ERANGE` when `buf` is too small).
pub(crate) fn flistxattr(fd: std::os::fd::BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: `fd` is a borrowed open descriptor and the kernel writes at
    // most `buf.len()` bytes into `buf`, which is valid for that many bytes.
    let n = unsafe {
        libc::flistxattr(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
        )
    };
    check(n as libc::c_long).map(|n| n as usize)
}

/// `fremovexattr(2)`: remove the attribute `name` of `fd`.
pub(crate) fn fremovexattr(fd: std::os::fd::BorrowedFd<'_>, name: &CStr) -> SysResult<()> {
    // SAFETY: `fd` is a borrowed open descriptor and `name` a valid
    // NUL-terminated string; nothing is written to our memory.
    check_int(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) }).map(|_| ())
}

/// `fsetxattr(2)`: set the attribute `name` of `fd` to `value` (tests build
/// overlay upper layers by hand with it).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn fsetxattr(
    fd: std::os::fd::BorrowedFd<'_>,
    name: &CStr,
    value: &[u8],
) -> SysResult<()> {
    // SAFETY: `fd` is a borrowed open descriptor, `name` a valid
    // NUL-terminated string and `value` valid for `value.len()` bytes, which
    // the kernel only reads.
    check_int(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast::<libc::c_void>(),
            value.len(),
            0,
        )
    })
    .map(|_| ())
}

// ---- end of staged writes: extended attributes ----

#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) mod attempt {
    use super::{SysResult, check, check_int};
    use std::ffi::CStr;

    /// `socket(domain, type, 0)` with a raw 64-bit domain argument; closes
    /// the descriptor on success.
    pub(crate) fn socket_raw(domain: u64, ty: libc::c_int) -> SysResult<()> {
        // SAFETY: integer arguments only; a returned descriptor is closed.
        let fd = check(unsafe { libc::syscall(libc::SYS_socket, domain, ty, 0) })?;
        super::close(fd as libc::c_int);
        Ok(())
    }

    /// `socket(domain, type, protocol)`: the descriptor.
    pub(crate) fn socket_proto(
        domain: libc::c_int,
        ty: libc::c_int,
        protocol: libc::c_int,
    ) -> SysResult<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: integer arguments only.
        let fd = check_int(unsafe { libc::socket(domain, ty, protocol) })?;
        // SAFETY: `fd` is a new descriptor this process owns and nothing
        // else closes.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// `socketpair(domain, type, 0)`; closes both ends on success.
    pub(crate) fn socketpair(domain: libc::c_int, ty: libc::c_int) -> SysResult<()> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints the kernel writes.
        check_int(unsafe { libc::socketpair(domain, ty, 0, fds.as_mut_ptr()) })?;
        for fd in fds {
            super::close(fd);
        }
        Ok(())
    }

    /// `io_uring_setup(1, NULL)`: allowed it fails with `EFAULT`.
    pub(crate) fn io_uring_setup() -> SysResult<()> {
        // SAFETY: a NULL params pointer makes the kernel fail with EFAULT
        // before touching memory.
        check(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, std::ptr::null::<u8>()) })
            .map(|_| ())
    }

    /// `unshare(flags)` with a raw 64-bit argument.
    pub(crate) fn unshare_raw(flags: u64) -> SysResult<()> {
        // SAFETY: integer argument only.
        check(unsafe { libc::syscall(libc::SYS_unshare, flags) }).map(|_| ())
    }

    /// `clone3(NULL, 0)`: allowed it fails with `EINVAL`/`EFAULT`.
    pub(crate) fn clone3_null() -> SysResult<()> {
        // SAFETY: a NULL clone_args with size 0 is rejected by the kernel
        // before any process is created.
        check(unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) })
            .map(|_| ())
    }

    /// `setns(-1, 0)`: allowed it fails with `EBADF`.
    pub(crate) fn setns_bad() -> SysResult<()> {
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_setns, -1i32, 0i32) }).map(|_| ())
    }

    /// `mount(NULL, NULL, NULL, 0, NULL)`: allowed it fails with `EFAULT`
    /// or `EPERM` (no capability).
    pub(crate) fn mount_null() -> SysResult<()> {
        // SAFETY: NULL pointers are rejected by the kernel.
        check_int(unsafe {
            libc::mount(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                0,
                std::ptr::null(),
            )
        })
        .map(|_| ())
    }

    /// `umount2(path, MNT_DETACH)`.
    pub(crate) fn umount(path: &CStr) -> SysResult<()> {
        // SAFETY: valid NUL-terminated path.
        check_int(unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) }).map(|_| ())
    }

    /// `open_tree(-1, NULL, 0)`: allowed it fails with `EBADF`/`EFAULT`.
    pub(crate) fn open_tree_bad() -> SysResult<()> {
        // SAFETY: bad descriptor and NULL path are rejected by the kernel.
        check(unsafe { libc::syscall(libc::SYS_open_tree, -1i32, std::ptr::null::<u8>(), 0u32) })
            .map(|_| ())
    }

    /// `fsopen(NULL, 0)`: allowed it fails with `EFAULT`.
    pub(crate) fn fsopen_null() -> SysResult<()> {
        // SAFETY: NULL name is rejected by the kernel.
        check(unsafe { libc::syscall(libc::SYS_fsopen, std::ptr::null::<u8>(), 0u32) }).map(|_| ())
    }

    /// `move_mount(-1, NULL, -1, NULL, 0)`.
    pub(crate) fn move_mount_bad() -> SysResult<()> {
        // SAFETY: bad descriptors and NULL paths are rejected by the kernel.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                -1i32,
                std::ptr::null::<u8>(),
                -1i32,
                std::ptr::null::<u8>(),
                0u32,
            )
        })
        .map(|_| ())
    }

    /// `pivot_root(".", ".")`.
    pub(crate) fn pivot_root_dot() -> SysResult<()> {
        // SAFETY: static NUL-terminated strings.
        check(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) })
            .map(|_| ())
    }

    /// `chroot(path)`.
    pub(crate) fn chroot(path: &CStr) -> SysResult<()> {
        // SAFETY: valid NUL-terminated path.
        check_int(unsafe { libc::chroot(path.as_ptr()) }).map(|_| ())
    }

    /// `mknod(path, S_IFCHR|0600, makedev(1, 3))`.
    pub(crate) fn mknod_null(path: &CStr) -> SysResult<()> {
        // SAFETY: valid NUL-terminated path and integer arguments.
        check_int(unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) })
            .map(|_| ())
    }

    /// `ptrace(PTRACE_ATTACH, pid)`; detaches again on success.
    pub(crate) fn ptrace_attach(pid: libc::pid_t) -> SysResult<()> {
        // SAFETY: integer arguments; no memory is passed.
        check(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) })?;
        // SAFETY: as above.
        unsafe {
            libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize);
        }
        Ok(())
    }

    /// `process_vm_readv(pid, NULL, 0, NULL, 0, 0)`: allowed it returns 0
    /// or fails with `ESRCH`/`EPERM`.
    pub(crate) fn process_vm_readv(pid: libc::pid_t) -> SysResult<()> {
        // SAFETY: zero-length iovec arrays; the kernel touches no memory.
        check(unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                pid,
                std::ptr::null::<u8>(),
                0usize,
                std::ptr::null::<u8>(),
                0usize,
                0usize,
            )
        })
        .map(|_| ())
    }

    /// `ioctl(fd, request, NULL)` with a raw 64-bit request.
    pub(crate) fn ioctl_raw(fd: libc::c_int, request: u64) -> SysResult<()> {
        // A buffer larger than any terminal ioctl argument (TIOCSTI reads
        // one byte, TCGETS writes a termios, TIOCLINUX reads one byte).
        let mut buf = [b'x'; 256];
        // SAFETY: the argument points at 256 valid, writable bytes, more
        // than any request used here reads or writes.
        check(unsafe { libc::syscall(libc::SYS_ioctl, fd, request, buf.as_mut_ptr()) }).map(|_| ())
    }

    /// A syscall number with arguments all zero.
    pub(crate) fn syscall0(nr: libc::c_long) -> SysResult<libc::c_long> {
        // SAFETY: only used with syscalls that take no pointer or reject
        // zero/NULL arguments (keyctl, bpf, perf_event_open, userfaultfd,
        // kexec_load, init_module, x32 numbers).
        check(unsafe { libc::syscall(nr, 0usize, 0usize, 0usize, 0usize, 0usize, 0usize) })
    }

    /// `getpid` through the i386 ABI (`int 0x80`, number 20) from 64-bit
    /// code: the raw return value.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn i386_getpid() -> libc::c_long {
        let ret: libc::c_long;
        // SAFETY: the i386 getpid takes no arguments and touches no memory;
        // the compat entry may clobber r8-r11, declared as outputs.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("rax") 20_i64 => ret,
                out("r8") _,
                out("r9") _,
                out("r10") _,
                out("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// `personality(persona)`.
    pub(crate) fn personality(persona: libc::c_ulong) -> SysResult<libc::c_int> {
        // SAFETY: integer argument only.
        check_int(unsafe { libc::personality(persona) })
    }

    /// `add_key("user", desc, payload, KEY_SPEC_SESSION_KEYRING)`: the new
    /// key's serial.
    pub(crate) fn add_session_key(desc: &CStr, payload: &[u8]) -> SysResult<libc::c_long> {
        // SAFETY: NUL-terminated type and description, and a payload pointer
        // with its exact length.
        check(unsafe {
            libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                desc.as_ptr(),
                payload.as_ptr(),
                payload.len(),
                libc::KEY_SPEC_SESSION_KEYRING,
            )
        })
    }

    /// `keyctl(KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, "user", desc, 0)`:
    /// the serial of the key found through the session keyring.
    pub(crate) fn search_session_key(desc: &CStr) -> SysResult<libc::c_long> {
        // SAFETY: NUL-terminated type and description; no destination
        // keyring.
        check(unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                libc::KEYCTL_SEARCH,
                libc::KEY_SPEC_SESSION_KEYRING,
                c"user".as_ptr(),
                desc.as_ptr(),
                0,
            )
        })
    }

    /// `setsockopt(fd, level, name, &value, sizeof(int))`.
    pub(crate) fn setsockopt_int(
        fd: libc::c_int,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
    ) -> SysResult<()> {
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the option value points at one valid int of `len` bytes.
        check_int(unsafe { libc::setsockopt(fd, level, name, (&raw const value).cast(), len) })
            .map(|_| ())
    }

    /// `setsockopt(fd, level, name, value, len(value))`, a byte string
    /// option (`TCP_ULP`).
    pub(crate) fn setsockopt_bytes(
        fd: libc::c_int,
        level: libc::c_int,
        name: libc::c_int,
        value: &[u8],
    ) -> SysResult<()> {
        let len = libc::socklen_t::try_from(value.len()).map_err(|_| libc::EINVAL)?;
        // SAFETY: the option value points at `len` valid bytes.
        check_int(unsafe { libc::setsockopt(fd, level, name, value.as_ptr().cast(), len) })
            .map(|_| ())
    }

    /// How [`fastopen_send`] sends with `MSG_FASTOPEN`.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Send {
        To,
        Msg,
        Mmsg,
    }

    fn sockaddr_v4(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        }
    }

    /// `connect(fd, addr)`.
    pub(crate) fn connect_v4(fd: libc::c_int, addr: std::net::SocketAddrV4) -> SysResult<()> {
        let sa = sockaddr_v4(addr);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: a valid sockaddr_in of `len` bytes.
        check_int(unsafe { libc::connect(fd, (&raw const sa).cast(), len) }).map(|_| ())
    }

    /// One byte sent with `MSG_FASTOPEN` to `addr` on an unconnected TCP
    /// socket: a TCP Fast Open connect.
    pub(crate) fn fastopen_send(
        fd: libc::c_int,
        addr: std::net::SocketAddrV4,
        how: Send,
    ) -> SysResult<()> {
        let sa = sockaddr_v4(addr);
        let sa_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let byte = [b'x'];
        let mut iov = libc::iovec {
            iov_base: byte.as_ptr() as *mut libc::c_void,
            iov_len: 1,
        };
        // SAFETY: an all-zero msghdr is valid (no name, no iovec, no
        // control data); the fields set below point at live locals.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw const sa).cast_mut().cast();
        msg.msg_namelen = sa_len;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        let ret = match how {
            // SAFETY: one valid byte and a sockaddr_in of `sa_len` bytes.
            Send::To => unsafe {
                libc::sendto(
                    fd,
                    byte.as_ptr().cast(),
                    1,
                    libc::MSG_FASTOPEN,
                    (&raw const sa).cast(),
                    sa_len,
                )
            },
            // SAFETY: `msg` points at the live sockaddr and iovec above.
            Send::Msg => unsafe { libc::sendmsg(fd, &raw const msg, libc::MSG_FASTOPEN) },
            Send::Mmsg => {
                let mut mm = libc::mmsghdr {
                    msg_hdr: msg,
                    msg_len: 0,
                };
                // SAFETY: one mmsghdr whose header points at the live
                // sockaddr and iovec above; the kernel writes `msg_len`.
                let n = unsafe { libc::sendmmsg(fd, &raw mut mm, 1, libc::MSG_FASTOPEN as _) };
                libc::ssize_t::try_from(n).unwrap_or(-1)
            }
        };
        if ret < 0 { Err(super::errno()) } else { Ok(()) }
    }

    /// A syscall that sets a file mode (`chmod`, `fchmod`, `fchmodat`,
    /// `fchmodat2`) or creates a file with one (`open`, `openat`, `creat`,
    /// `mknod`, `mknodat`, regular files only), by its name, on `path`.
    /// A descriptor it opens is closed.
    pub(crate) fn set_mode(kind: &str, path: &CStr, mode: u32) -> SysResult<()> {
        let p = path.as_ptr();
        let (m, cwd) = (libc::c_long::from(mode), libc::c_long::from(libc::AT_FDCWD));
        let reg = libc::c_long::from(libc::S_IFREG | mode);
        let create = libc::c_long::from(libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC);
        let ret = match kind {
            #[cfg(target_arch = "x86_64")]
            "chmod" => {
                // SAFETY: a valid NUL-terminated path and an integer mode.
                unsafe { libc::syscall(libc::SYS_chmod, p, m) }
            }
            "fchmodat" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(libc::SYS_fchmodat, cwd, p, m) }
            }
            "fchmodat2" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(crate::seccomp::SYS_FCHMODAT2, cwd, p, m, 0) }
            }
            #[cfg(target_arch = "x86_64")]
            "open" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(libc::SYS_open, p, create, m) }
            }
            "openat" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(libc::SYS_openat, cwd, p, create, m) }
            }
            #[cfg(target_arch = "x86_64")]
            "creat" => {
                // SAFETY: a valid NUL-terminated path and an integer mode.
                unsafe { libc::syscall(libc::SYS_creat, p, m) }
            }
            #[cfg(target_arch = "x86_64")]
            "mknod" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(libc::SYS_mknod, p, reg, 0) }
            }
            "mknodat" => {
                // SAFETY: a valid NUL-terminated path and integers.
                unsafe { libc::syscall(libc::SYS_mknodat, cwd, p, reg, 0) }
            }
            "fchmod" => {
                // SAFETY: a valid NUL-terminated path and integers.
                let fd = check(unsafe { libc::syscall(libc::SYS_openat, cwd, p, 0, 0) })?;
                // SAFETY: `fd` is the descriptor just opened.
                let r = unsafe { libc::syscall(libc::SYS_fchmod, fd, m) };
                let r = check(r);
                super::close(fd as libc::c_int);
                return r.map(|_| ());
            }
            _ => return Err(libc::EINVAL),
        };
        let ret = check(ret)?;
        if matches!(kind, "open" | "openat" | "creat") {
            super::close(ret as libc::c_int);
        }
        Ok(())
    }

    /// `kill(pid, sig)`.
    pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> SysResult<()> {
        // SAFETY: integer arguments only.
        check_int(unsafe { libc::kill(pid, sig) }).map(|_| ())
    }
}
