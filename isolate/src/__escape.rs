//! Escape attempts for the test suite and `palisade probe`, run by the
//! `palisade-escape-probe` binary inside a sandbox.
//!
//! Each attempt performs one action and answers `ok`, `ok <value>` or
//! `err <errno>`; tests compare the answer inside the sandbox with the
//! answer outside it (the positive control). Not a stable API.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::sys::attempt;

fn res<T>(r: Result<T, i32>) -> String {
    match r {
        Ok(_) => String::from("ok"),
        Err(e) => format!("err {e}"),
    }
}

fn io<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => String::from("ok"),
        Err(e) => format!("err {}", e.raw_os_error().unwrap_or(-1)),
    }
}

fn c(s: &str) -> CString {
    CString::new(s.as_bytes()).unwrap_or_default()
}

fn num(s: Option<&String>) -> i64 {
    s.and_then(|v| {
        v.strip_prefix("0x")
            .map_or_else(|| v.parse().ok(), |h| i64::from_str_radix(h, 16).ok())
    })
    .unwrap_or(0)
}

fn pty_ioctl(request: u64) -> String {
    // Open a new pty pair; opening the slave without O_NOCTTY makes it our
    // controlling terminal (we are a session leader after setsid), so the
    // kernel itself would allow TIOCSTI: only a filter can refuse it.
    let master =
        match nix::pty::posix_openpt(nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY) {
            Ok(m) => m,
            Err(e) => return format!("err {}", e as i32),
        };
    if let Err(e) = nix::pty::grantpt(&master).and_then(|()| nix::pty::unlockpt(&master)) {
        return format!("err {}", e as i32);
    }
    let name = match nix::pty::ptsname_r(&master) {
        Ok(n) => n,
        Err(e) => return format!("err {}", e as i32),
    };
    let _ = nix::unistd::setsid();
    let slave = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&name)
    {
        Ok(f) => f,
        Err(e) => return io::<()>(Err(e)),
    };
    use std::os::fd::AsRawFd;
    let out = res(attempt::ioctl_raw(slave.as_raw_fd(), request));
    // Closing the master would hang up our new controlling terminal and
    // SIGHUP us before the answer is printed: keep both open until exit.
    std::mem::forget(slave);
    std::mem::forget(master);
    out
}

/// A TCP Fast Open connect to `host:port` (`port` `self`: a listener this
/// probe opens on 127.0.0.1): `sendto`, `sendmsg` or `sendmmsg` with
/// `MSG_FASTOPEN`, or `connect-opt` (`TCP_FASTOPEN_CONNECT`, then `connect`
/// and a write). `ok` once sent (and, to its own listener, accepted).
fn fastopen(how: &str, host: &str, port: &str) -> String {
    use std::os::fd::AsRawFd;
    let own = if port == "self" {
        match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(l) => Some(l),
            Err(e) => return io::<()>(Err(e)),
        }
    } else {
        None
    };
    let port = match &own {
        Some(l) => l.local_addr().map(|a| a.port()).unwrap_or(0),
        None => port.parse().unwrap_or(0),
    };
    let Ok(ip) = host.parse::<std::net::Ipv4Addr>() else {
        return String::from("err 22");
    };
    let addr = std::net::SocketAddrV4::new(ip, port);
    let sock = match nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    ) {
        Ok(s) => s,
        Err(e) => return format!("err {}", e as i32),
    };
    let fd = sock.as_raw_fd();
    let sent = match how {
        "sendto" => attempt::fastopen_send(fd, addr, attempt::Send::To),
        "sendmsg" => attempt::fastopen_send(fd, addr, attempt::Send::Msg),
        "sendmmsg" => attempt::fastopen_send(fd, addr, attempt::Send::Mmsg),
        "connect-opt" => {
            attempt::setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT, 1)
                .and_then(|()| attempt::connect_v4(fd, addr))
                .and_then(|()| {
                    nix::unistd::write(&sock, b"x")
                        .map(|_| ())
                        .map_err(|e| e as i32)
                })
        }
        _ => Err(libc::EINVAL),
    };
    if let Err(e) = sent {
        return format!("err {e}");
    }
    let Some(listener) = own else {
        return String::from("ok");
    };
    // The connection is established once the send returns; accept it
    // (bounded: a loaded machine may take its time).
    if let Err(e) = listener.set_nonblocking(true) {
        return io::<()>(Err(e));
    }
    for _ in 0..500 {
        match listener.accept() {
            Ok(_) => return String::from("ok"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return io::<()>(Err(e)),
        }
    }
    String::from("err 110")
}

/// Whether fd 0 is a terminal, its window size, and the device number of
/// every character device among the open descriptors:
/// `ok tty=<bool> size=<rows>x<cols> fds=<fd>:<rdev>,…`.
fn ttys() -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else {
        return String::from("err /proc/self/fd");
    };
    let mut fds: Vec<i64> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    fds.sort_unstable();
    let mut devices = Vec::new();
    for fd in fds {
        if let Ok(m) = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            && m.file_type().is_char_device()
        {
            devices.push(format!("{fd}:{}", m.rdev()));
        }
    }
    let size = crate::sys::window_size(0)
        .map(|w| format!("{}x{}", w.ws_row, w.ws_col))
        .unwrap_or_else(|e| format!("err{e}"));
    format!("ok tty={tty} size={size} fds={}", devices.join(","))
}

/// Wait up to `secs` seconds for input on fd 0: `ok got <bytes>` (escaped)
/// or `ok none`.
fn read_input(secs: u16) -> String {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::from(secs.saturating_mul(1000).min(60_000));
    match poll(&mut fds, ms) {
        Ok(0) => String::from("ok none"),
        Ok(_) => {
            let mut buf = [0u8; 256];
            match nix::unistd::read(stdin.as_fd(), &mut buf) {
                Ok(n) => format!("ok got {}", buf.get(..n).unwrap_or(&[]).escape_ascii()),
                Err(e) => format!("err {}", e as i32),
            }
        }
        Err(e) => format!("err {}", e as i32),
    }
}

/// Inject one byte (`x`) into fd 0's input queue with `TIOCSTI`, then read
/// it back from fd 0 (non-canonical, no echo): `ok <bytes>` or `err <errno>`.
fn tiocsti_readback() -> String {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let Ok(mut t) = tcgetattr(&stdin) else {
        return String::from("err tcgetattr");
    };
    t.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
    if tcsetattr(&stdin, SetArg::TCSANOW, &t).is_err() {
        return String::from("err tcsetattr");
    }
    if let Err(e) = attempt::ioctl_raw(0, libc::TIOCSTI) {
        return format!("err {e}");
    }
    read_input(10).replacen("ok got ", "ok ", 1)
}

/// Say `ready` on stdout, then wait up to `secs` seconds for SIGWINCH:
/// `ok <rows>x<cols>` (fd 0's window size once it came) or `ok none`.
fn winch(secs: u16) -> String {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use std::os::fd::AsFd;
    let mut set = SigSet::empty();
    set.add(Signal::SIGWINCH);
    if let Err(e) = set.thread_block() {
        return format!("err {}", e as i32);
    }
    let sfd = match SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(e) => return format!("err {}", e as i32),
    };
    let mut out = std::io::stdout();
    if out
        .write_all(b"ready\n")
        .and_then(|()| out.flush())
        .is_err()
    {
        return String::from("err stdout");
    }
    let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
    match poll(
        &mut fds,
        PollTimeout::from(secs.saturating_mul(1000).min(60_000)),
    ) {
        Ok(0) => String::from("ok none"),
        Ok(_) => match crate::sys::window_size(0) {
            Ok(w) => format!("ok {}x{}", w.ws_row, w.ws_col),
            Err(e) => format!("err {e}"),
        },
        Err(e) => format!("err {}", e as i32),
    }
}

/// The number of bytes waiting in `fd`'s input queue (`FIONREAD`; tests
/// only), or -1 when the call fails.
pub fn pending_input_for_tests(fd: std::os::fd::BorrowedFd<'_>) -> i64 {
    use std::os::fd::AsRawFd;
    crate::sys::input_pending(fd.as_raw_fd())
        .ok()
        .and_then(|n| i64::try_from(n).ok())
        .unwrap_or(-1)
}

/// A TCP-like connect through a socket of another IP protocol:
/// `socket(AF_INET, type, protocol)` (`type` `stream` or `seqpacket`), then
/// `connect()` to `host:port` (`port` `self`: a TCP listener this probe opens
/// on 127.0.0.1). An MPTCP socket (protocol 262) falls back to plain TCP
/// with a TCP peer. `ok` once connected (and, to its own listener, accepted).
fn connect_proto(ty: &str, protocol: &str, host: &str, port: &str) -> String {
    let own = if port == "self" {
        match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(l) => Some(l),
            Err(e) => return io::<()>(Err(e)),
        }
    } else {
        None
    };
    let port = match &own {
        Some(l) => l.local_addr().map(|a| a.port()).unwrap_or(0),
        None => port.parse().unwrap_or(0),
    };
    let (Ok(ip), Ok(protocol)) = (host.parse::<std::net::Ipv4Addr>(), protocol.parse::<i32>())
    else {
        return String::from("err 22");
    };
    let ty = if ty == "seqpacket" {
        libc::SOCK_SEQPACKET
    } else {
        libc::SOCK_STREAM
    };
    let sock = match attempt::socket_proto(libc::AF_INET, ty | libc::SOCK_CLOEXEC, protocol) {
        Ok(s) => s,
        Err(e) => return format!("err {e}"),
    };
    use std::os::fd::AsRawFd;
    let addr = std::net::SocketAddrV4::new(ip, port);
    if let Err(e) = attempt::connect_v4(sock.as_raw_fd(), addr) {
        return format!("err {e}");
    }
    let Some(listener) = own else {
        return String::from("ok");
    };
    match listener.accept() {
        Ok(_) => String::from("ok"),
        Err(e) => io::<()>(Err(e)),
    }
}

/// Run one attempt named by `args[0]`.
/// The number the next descriptor this (single-threaded) probe opens gets.
fn lowest_free_fd() -> std::io::Result<i64> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open("/dev/null")?;
    Ok(i64::from(f.as_raw_fd()))
}

pub fn run(args: &[String]) -> String {
    let a = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match a(0) {
        "write" => io(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(a(1))
            .and_then(|mut f| f.write_all(b"x"))),
        "truncate" => io(std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(a(1))),
        "cat" => {
            let mut s = String::new();
            match std::fs::File::open(a(1)).and_then(|mut f| f.read_to_string(&mut s)) {
                Ok(_) => format!("ok {s}"),
                Err(e) => format!("err {}", e.raw_os_error().unwrap_or(-1)),
            }
        }
        "read" => io(std::fs::read(a(1))),
        "ls" => match std::fs::read_dir(a(1)) {
            Ok(rd) => {
                let mut names: Vec<String> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                format!("ok {}", names.join(","))
            }
            Err(e) => format!("err {}", e.raw_os_error().unwrap_or(-1)),
        },
        "readlink" => match std::fs::read_link(a(1)) {
            Ok(p) => format!("ok {}", p.display()),
            Err(e) => format!("err {}", e.raw_os_error().unwrap_or(-1)),
        },
        "mkdir" => io(std::fs::create_dir(a(1))),
        "rmdir" => io(std::fs::remove_dir(a(1))),
        "unlink" => io(std::fs::remove_file(a(1))),
        "rename" => io(std::fs::rename(a(1), a(2))),
        "symlink" => io(std::os::unix::fs::symlink(a(1), a(2))),
        "link" => io(std::fs::hard_link(a(1), a(2))),
        "exists" => format!("ok {}", std::fs::symlink_metadata(a(1)).is_ok()),
        "socket" => {
            let ty = match a(2) {
                "dgram" => libc::SOCK_DGRAM,
                "raw" => libc::SOCK_RAW,
                // SOCK_PACKET, which libc does not name for glibc.
                "packet" => 10,
                _ => libc::SOCK_STREAM,
            };
            res(attempt::socket_raw(
                u64::try_from(num(args.get(1))).unwrap_or(0),
                ty,
            ))
        }
        "socketpair" => {
            let ty = if a(1) == "dgram" {
                libc::SOCK_DGRAM
            } else {
                libc::SOCK_STREAM
            };
            res(attempt::socketpair(libc::AF_UNIX, ty))
        }
        "connect-unix" => io(std::os::unix::net::UnixStream::connect(a(1))),
        "connect-abstract" => {
            use std::os::linux::net::SocketAddrExt;
            match std::os::unix::net::SocketAddr::from_abstract_name(a(1).as_bytes()) {
                Ok(addr) => io(std::os::unix::net::UnixStream::connect_addr(&addr)),
                Err(e) => io::<()>(Err(e)),
            }
        }
        "connect-tcp" => {
            let addr = format!("{}:{}", a(1), a(2));
            match addr.parse::<std::net::SocketAddr>() {
                Ok(sa) => io(std::net::TcpStream::connect_timeout(
                    &sa,
                    std::time::Duration::from_secs(2),
                )),
                Err(_) => String::from("err 22"),
            }
        }
        "http-get" => {
            // A plain HTTP/1.0 GET through 127.0.0.1:<port>; answers the
            // status line.
            let addr = format!("127.0.0.1:{}", a(1));
            match std::net::TcpStream::connect(addr) {
                Ok(mut s) => {
                    let _ = s.write_all(format!("GET {} HTTP/1.0\r\n\r\n", a(2)).as_bytes());
                    let mut out = String::new();
                    let _ = s.read_to_string(&mut out);
                    format!("ok {}", out.lines().next().unwrap_or(""))
                }
                Err(e) => io::<()>(Err(e)),
            }
        }
        "udp-send" => match std::net::UdpSocket::bind("0.0.0.0:0") {
            Ok(s) => io(s.send_to(b"x", format!("{}:{}", a(1), a(2)))),
            Err(e) => io::<()>(Err(e)),
        },
        "resolve" => {
            use std::net::ToSocketAddrs;
            io(format!("{}:80", a(1)).to_socket_addrs())
        }
        "net-ifaces" => match std::fs::read_to_string("/proc/net/dev") {
            Ok(s) => {
                let mut names: Vec<&str> = s
                    .lines()
                    .skip(2)
                    .filter_map(|l| l.split(':').next())
                    .map(str::trim)
                    .collect();
                names.sort_unstable();
                format!("ok {}", names.join(","))
            }
            Err(e) => io::<()>(Err(e)),
        },
        "io_uring" => res(attempt::io_uring_setup()),
        "unshare" => res(attempt::unshare_raw(
            u64::try_from(num(args.get(1))).unwrap_or(0),
        )),
        "clone3" => res(attempt::clone3_null()),
        "setns" => res(attempt::setns_bad()),
        "mount" => res(attempt::mount_null()),
        "umount" => res(attempt::umount(&c(a(1)))),
        "open_tree" => res(attempt::open_tree_bad()),
        "fsopen" => res(attempt::fsopen_null()),
        "move_mount" => res(attempt::move_mount_bad()),
        "pivot_root" => res(attempt::pivot_root_dot()),
        "chroot" => res(attempt::chroot(&c(a(1)))),
        "mknod" => res(attempt::mknod_null(&c(a(1)))),
        "ptrace" => res(attempt::ptrace_attach(
            i32::try_from(num(args.get(1))).unwrap_or(0),
        )),
        "process_vm-self" => res(attempt::process_vm_readv(
            i32::try_from(std::process::id()).unwrap_or(0),
        )),
        "ptrace-child" => match std::process::Command::new("/bin/sleep").arg("5").spawn() {
            Ok(mut ch) => {
                let r = attempt::ptrace_attach(i32::try_from(ch.id()).unwrap_or(0));
                let _ = ch.kill();
                let _ = ch.wait();
                res(r)
            }
            Err(e) => io::<()>(Err(e)),
        },
        "sandboxed" => {
            // Launch the rest of the arguments inside a sandbox of the named
            // profile, from this process (whose environment the test set).
            let Some(profile) = crate::Profile::by_name(a(1)) else {
                return String::from("err unknown profile");
            };
            let mut sb = crate::Sandbox::new(profile);
            if let Ok(exe) = std::env::current_exe()
                && let Some(dir) = exe.parent()
            {
                sb.read_only(dir);
            }
            let (r, w) = match nix::unistd::pipe() {
                Ok(p) => p,
                Err(e) => return format!("err {}", e as i32),
            };
            let mut cmd = crate::Command::new(args.iter().skip(2));
            cmd.stdout = crate::Stdio::Fd(w);
            match sb.spawn(cmd) {
                Ok(child) => {
                    let mut out = String::new();
                    let _ = std::fs::File::from(r).read_to_string(&mut out);
                    let _ = child.wait();
                    out.trim_end().to_owned()
                }
                Err(e) => format!("err {e}"),
            }
        }
        "process_vm" => res(attempt::process_vm_readv(
            i32::try_from(num(args.get(1))).unwrap_or(0),
        )),
        "kill" => res(attempt::kill(
            i32::try_from(num(args.get(1))).unwrap_or(0),
            i32::try_from(num(args.get(2))).unwrap_or(0),
        )),
        "ioctl-pty" => pty_ioctl(u64::try_from(num(args.get(1))).unwrap_or(0)),
        "syscall" => match attempt::syscall0(num(args.get(1))) {
            Ok(v) => format!("ok {v}"),
            Err(e) => format!("err {e}"),
        },
        "personality" => res(attempt::personality(
            libc::c_ulong::try_from(num(args.get(1))).unwrap_or(0),
        )),
        "status" => match std::fs::read_to_string("/proc/self/status") {
            Ok(s) => {
                let keys = [
                    "NoNewPrivs",
                    "CapInh",
                    "CapPrm",
                    "CapEff",
                    "CapBnd",
                    "CapAmb",
                    "Seccomp",
                    "Uid",
                    "Gid",
                ];
                let picked: Vec<String> = s
                    .lines()
                    .filter(|l| keys.iter().any(|k| l.starts_with(&format!("{k}:"))))
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect();
                format!("ok {}", picked.join(";"))
            }
            Err(e) => io::<()>(Err(e)),
        },
        "mountpoints" => match std::fs::read_to_string("/proc/self/mountinfo") {
            Ok(s) => {
                let mut m: Vec<&str> = s.lines().filter_map(|l| l.split(' ').nth(4)).collect();
                m.sort_unstable();
                m.dedup();
                format!("ok {}", m.join(","))
            }
            Err(e) => io::<()>(Err(e)),
        },
        "fds" => {
            match lowest_free_fd().and_then(|own| Ok((own, std::fs::read_dir("/proc/self/fd")?))) {
                Ok((own, rd)) => {
                    // The listing's own descriptor takes the lowest free number,
                    // which is not the highest one when an inherited set has a
                    // hole: drop exactly that number, nothing else.
                    let mut fds: Vec<i64> = rd
                        .flatten()
                        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                        .filter(|&fd| fd != own)
                        .collect();
                    fds.sort_unstable();
                    format!(
                        "ok {}",
                        fds.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
                    )
                }
                Err(e) => io::<()>(Err(e)),
            }
        }
        "env" => {
            let mut vars: Vec<String> = std::env::vars_os()
                .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                .collect();
            vars.sort();
            format!("ok {}", vars.join("\u{1f}"))
        }
        "getpid" => format!("ok {}", std::process::id()),
        "uid" => format!("ok {} {}", nix::unistd::getuid(), nix::unistd::getgid()),
        "hostname" => match nix::unistd::gethostname() {
            Ok(h) => format!("ok {}", h.to_string_lossy()),
            Err(e) => format!("err {}", e as i32),
        },
        "setuid" => res(nix::unistd::setuid(nix::unistd::Uid::from_raw(
            u32::try_from(num(args.get(1))).unwrap_or(0),
        ))
        .map_err(|e| e as i32)),
        "thread" => io(std::thread::Builder::new()
            .spawn(|| 7)
            .and_then(|h| h.join().map_err(|_| std::io::Error::other("join")))),
        "fork-kill-child" => {
            // Fork a child that sleeps and signal it: signalling its own
            // child must work.
            match std::process::Command::new("/bin/sleep").arg("5").spawn() {
                Ok(mut ch) => {
                    let pid = i32::try_from(ch.id()).unwrap_or(0);
                    let r = attempt::kill(pid, libc::SIGKILL);
                    let _ = ch.wait();
                    res(r)
                }
                Err(e) => io::<()>(Err(e)),
            }
        }
        "fork-many" => {
            let n = num(args.get(1));
            let mut kids = Vec::new();
            let mut made = 0;
            for _ in 0..n {
                match std::process::Command::new("/bin/sleep").arg("2").spawn() {
                    Ok(ch) => {
                        kids.push(ch);
                        made += 1;
                    }
                    Err(_) => break,
                }
            }
            for mut k in kids {
                let _ = k.kill();
                let _ = k.wait();
            }
            format!("ok {made}")
        }
        "alloc" => {
            let mib = usize::try_from(num(args.get(1))).unwrap_or(0);
            let mut v: Vec<u8> = Vec::new();
            match v.try_reserve_exact(mib << 20) {
                Ok(()) => String::from("ok"),
                Err(_) => String::from("err 12"),
            }
        }
        "fill" => {
            let mib = num(args.get(2));
            match std::fs::File::create(a(1)) {
                Ok(mut f) => {
                    let chunk = vec![0u8; 1 << 20];
                    let mut r = Ok(());
                    for _ in 0..mib {
                        r = f.write_all(&chunk);
                        if r.is_err() {
                            break;
                        }
                    }
                    let _ = std::fs::remove_file(a(1));
                    io(r)
                }
                Err(e) => io::<()>(Err(e)),
            }
        }
        "exec" => {
            let mut cmd = std::process::Command::new(a(1));
            cmd.args(args.iter().skip(2));
            match cmd.output() {
                Ok(o) => format!(
                    "ok {} {}",
                    o.status.code().unwrap_or(-1),
                    String::from_utf8_lossy(&o.stdout).trim()
                ),
                Err(e) => io::<()>(Err(e)),
            }
        }
        "scan" => {
            // Look for a marker in every readable file under a directory
            // (bounded), reporting paths that contain it. The marker is
            // given reversed so this process's own command line does not
            // contain it.
            let marker: Vec<u8> = a(2).bytes().rev().collect();
            let mut hits = Vec::new();
            let mut stack = vec![std::path::PathBuf::from(a(1))];
            let mut budget = 20_000;
            while let Some(p) = stack.pop() {
                budget -= 1;
                if budget == 0 {
                    break;
                }
                let Ok(meta) = std::fs::symlink_metadata(&p) else {
                    continue;
                };
                if meta.is_dir() {
                    if let Ok(rd) = std::fs::read_dir(&p) {
                        stack.extend(rd.flatten().map(|e| e.path()));
                    }
                } else if meta.is_file()
                    && meta.len() < (1 << 20)
                    && let Ok(b) = read_at_most(&p, 1 << 20)
                    && b.windows(marker.len().max(1))
                        .any(|w| w == marker.as_slice())
                {
                    hits.push(p.display().to_string());
                }
            }
            format!("ok {}", hits.join(","))
        }
        "read-at-stdin" => {
            // Read a file relative to standard input (a directory handed
            // over as a standard stream): openat(0, name).
            use std::os::fd::AsFd;
            match nix::fcntl::openat(
                std::io::stdin().as_fd(),
                Path::new(a(1)),
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            ) {
                Ok(f) => {
                    let mut s = String::new();
                    match std::fs::File::from(f).read_to_string(&mut s) {
                        Ok(_) => format!("ok {}", s.trim_end()),
                        Err(e) => io::<()>(Err(e)),
                    }
                }
                Err(e) => format!("err {}", e as i32),
            }
        }
        "held-fd-parent" => {
            // Open a directory, then try to walk to its parent through the
            // descriptor (openat(fd, "..")).
            match std::fs::File::open(a(1)) {
                Ok(f) => {
                    use std::os::fd::AsFd;
                    io(nix::fcntl::openat(
                        f.as_fd(),
                        Path::new(".."),
                        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                        nix::sys::stat::Mode::empty(),
                    )
                    .map_err(std::io::Error::from))
                }
                Err(e) => io::<()>(Err(e)),
            }
        }
        "mode" => {
            // `mode KIND PATH OCTAL`: set or create a file mode with one
            // syscall (see `attempt::set_mode`).
            let mode = u32::from_str_radix(a(3), 8).unwrap_or(0);
            res(attempt::set_mode(a(1), &c(a(2)), mode))
        }
        "fastopen" => fastopen(a(1), a(2), a(3)),
        "connect-proto" => connect_proto(a(1), a(2), a(3), a(4)),
        "tcp-sockopt" => {
            // `tcp-sockopt ulp NAME` (`TCP_ULP`, which turns a TCP socket
            // into another protocol's, as `smc` does) or `tcp-sockopt
            // nodelay` on a new, unconnected TCP socket.
            use std::os::fd::AsRawFd;
            match attempt::socket_proto(libc::AF_INET, libc::SOCK_STREAM, 0) {
                Ok(sock) => res(match a(1) {
                    "ulp" => attempt::setsockopt_bytes(
                        sock.as_raw_fd(),
                        libc::IPPROTO_TCP,
                        libc::TCP_ULP,
                        a(2).as_bytes(),
                    ),
                    "nodelay" => attempt::setsockopt_int(
                        sock.as_raw_fd(),
                        libc::IPPROTO_TCP,
                        libc::TCP_NODELAY,
                        1,
                    ),
                    _ => Err(libc::EINVAL),
                }),
                Err(e) => format!("err {e}"),
            }
        }
        #[cfg(target_arch = "x86_64")]
        "i386-getpid" => {
            // In a child, which the filter kills (SIGSYS): `ok` and its wait
            // status, 128 + the signal when killed; 0 when the call answered
            // a pid, 1 when it failed.
            match crate::sys::fork() {
                Ok(crate::sys::Forked::Child) => {
                    crate::sys::exit_now(i32::from(attempt::i386_getpid() <= 0))
                }
                Ok(crate::sys::Forked::Parent(pid)) => {
                    match crate::spawn::wait_code(nix::unistd::Pid::from_raw(pid)) {
                        Ok(code) => format!("ok {code}"),
                        Err(e) => io::<()>(Err(e)),
                    }
                }
                Err(e) => format!("err {e}"),
            }
        }
        "mountopts" => match std::fs::read_to_string("/proc/self/mountinfo") {
            // The per-mount options of the last mount at a path.
            Ok(s) => s
                .lines()
                .rev()
                .find(|l| l.split(' ').nth(4) == Some(a(1)))
                .and_then(|l| l.split(' ').nth(5))
                .map_or_else(|| String::from("err 2"), |o| format!("ok {o}")),
            Err(e) => io::<()>(Err(e)),
        },
        "keyring" => match crate::sys::session_keyring_id() {
            Ok(id) => format!("ok {id}"),
            Err(e) => format!("err {e}"),
        },
        "keyring-new" => {
            // Join a new session keyring holding a `user` key named by the
            // argument; answers the keyring's serial. Run in the launcher.
            match crate::sys::join_new_session_keyring()
                .and_then(|_| attempt::add_session_key(&c(a(1)), b"palisade test key"))
                .and_then(|_| crate::sys::session_keyring_id())
            {
                Ok(id) => format!("ok {id}"),
                Err(e) => format!("err {e}"),
            }
        }
        "key-find" => res(attempt::search_session_key(&c(a(1)))),
        "key-own" => res(attempt::add_session_key(&c(a(1)), b"own")
            .and_then(|_| attempt::search_session_key(&c(a(1))))),
        "ttys" => ttys(),
        "read-input" => read_input(u16::try_from(num(args.get(1))).unwrap_or(0)),
        "tiocsti" => res(attempt::ioctl_raw(0, libc::TIOCSTI)),
        "tiocsti-readback" => tiocsti_readback(),
        "winch" => winch(u16::try_from(num(args.get(1))).unwrap_or(0)),
        other => format!(
            "err unknown attempt `{}`",
            Path::new(other).as_os_str().as_bytes().escape_ascii()
        ),
    }
}

/// Fork the calling process (tests only): 0 in the child, the child's pid
/// in the parent, -1 on failure.
pub fn fork_for_tests() -> i32 {
    match crate::sys::fork() {
        Ok(crate::sys::Forked::Child) => 0,
        Ok(crate::sys::Forked::Parent(p)) => p,
        Err(_) => -1,
    }
}

/// Leave a child forked by [`fork_for_tests`] at once (`_exit`), without
/// running the parent's exit handlers or touching locks other threads held
/// at fork time.
pub fn exit_for_tests(code: i32) -> ! {
    crate::sys::exit_now(code)
}

/// Wait for a child forked by [`fork_for_tests`]: its exit code, or
/// `128 + signal`.
pub fn wait_for_tests(pid: i32) -> i32 {
    crate::spawn::wait_code(nix::unistd::Pid::from_raw(pid)).unwrap_or(-1)
}

/// Hold the background reaper (tests only): while the guard lives, the
/// reaper reaps nothing, so a test can see that a dropped
/// [`crate::SandboxChild`] was handed over rather than reaped by `drop`.
pub fn hold_reaper_for_tests() -> std::sync::MutexGuard<'static, ()> {
    crate::reaper::HOLD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The first `limit` bytes of `path`: `/proc` files report a size of 0
/// and some (`pagemap`, `kcore`) would read for gigabytes, which without an
/// address-space limit (the default now) grows this process until the host
/// runs out of memory.
fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut out)?;
    Ok(out)
}
