//! The seccomp filter: one classic BPF program, generated here in the
//! launcher and installed last in the worker.
//!
//! In order:
//! 1. the architecture check: another syscall ABI (i386 `int 0x80`, which
//!    also covers `socketcall`) kills the process;
//! 2. a syscall number with the x32 bit (`0x4000_0000`) set answers `EPERM`;
//!    a number above [`LAST_NR`], the newest syscall this table knows,
//!    answers `ENOSYS`, as on a kernel that predates it, until someone
//!    classifies it here;
//! 3. a binary search over the sorted numbers of the syscalls that have a
//!    rule: a syscall denied outright answers `EPERM`, `clone3` and
//!    `openat2` answer `ENOSYS` (so libc falls back to `clone` and callers to
//!    `openat`, whose arguments the filter can inspect), a syscall with
//!    argument rules jumps to its block; every other number is allowed. The
//!    tests hold the list of the syscalls allowed on purpose and fail on any
//!    number up to [`LAST_NR`] that is neither allowed nor ruled here;
//! 4. the argument blocks. Every integer argument is compared on its low
//!    32 bits, which is what the kernel reads for an `int` argument, so
//!    high bits cannot smuggle a value past a comparison (CVE-2019-10063
//!    style).
//!
//! Why generated here rather than by a general compiler such as
//! `seccompiler`: its program is a linear chain of one comparison per
//! syscall, and the kernel pays for the length at install time. It checks,
//! converts and JITs the program, then runs it once per syscall number to
//! find the numbers it can allow without running the filter at all (the
//! seccomp action cache); on a chain, every allowed number walks all
//! comparisons. The search tree answers any number after about six
//! comparisons, which made installing the filter several times cheaper on
//! the launch path, and every filtered syscall of the worker cheaper too.
//! The test module keeps the former `seccompiler` program as an oracle: the
//! two must answer alike for every syscall number and a grid of arguments.

/// One classic BPF instruction (`struct sock_filter`).
pub(crate) use libc::sock_filter;

/// The compiled filter: one program.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    pub(crate) program: Vec<sock_filter>,
}

/// The `AUDIT_ARCH_*` value of this target (`seccomp_data.arch`).
fn audit_arch() -> Result<u32, String> {
    // EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    const LE64: u32 = 0x8000_0000 | 0x4000_0000;
    if cfg!(target_endian = "big") {
        // The argument offsets below assume the low word comes first.
        Err(String::from("no seccomp filter for big-endian targets"))
    } else if cfg!(target_arch = "x86_64") {
        Ok(62 | LE64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(183 | LE64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(243 | LE64)
    } else {
        Err(String::from("no seccomp filter for this architecture"))
    }
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JA: u16 = 0x05;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_EPERM: u32 = RET_ERRNO | libc::EPERM as u32;
const RET_ENOSYS: u32 = RET_ERRNO | libc::ENOSYS as u32;
/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian).
const fn off_arg(i: u32) -> u32 {
    16 + 8 * i
}
/// The x32 syscall bit.
pub(crate) const X32_BIT: u32 = 0x4000_0000;
/// At most this many numbers are compared one by one at a leaf of the
/// search tree.
const LEAF: usize = 4;
/// The highest syscall number the table classifies: `file_setattr` (469)
/// of Linux 6.18, the same number in `arch/x86/entry/syscalls/syscall_64.tbl`
/// and in the generic table of aarch64 and riscv64. A higher number answers
/// `ENOSYS`.
pub(crate) const LAST_NR: u32 = 469;
/// Syscalls newer than the `libc` crate's constants, by number (the same in
/// `syscall_64.tbl` and the generic table). `statmount` and `listmount`
/// (Linux 6.8) read a mount namespace's tree by id (another namespace's
/// with a capability over it), `open_tree_attr` (Linux 6.15) clones mounts
/// like `open_tree`.
const SYS_STATMOUNT: libc::c_long = 457;
const SYS_LISTMOUNT: libc::c_long = 458;
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;
/// `fchmodat2` (Linux 6.6), 452 in both tables: `libc` names it for x86-64
/// only.
pub(crate) const SYS_FCHMODAT2: libc::c_long = 452;
/// The file-type mask of a socket type (`SOCK_TYPE_MASK`).
const SOCK_TYPE_MASK: u32 = 0xf;
/// The protocols an `AF_INET`/`AF_INET6` stream socket may name: the
/// default (TCP) and TCP. Landlock's TCP rule checks only sockets of the
/// TCP protocol, so `IPPROTO_MPTCP` (which falls back to TCP with any TCP
/// peer), `IPPROTO_SCTP` and `IPPROTO_SMC` would connect past it.
const STREAM_PROTOCOLS: [libc::c_int; 2] = [0, libc::IPPROTO_TCP];
/// The protocols a datagram socket may name: the default (UDP), UDP, and
/// the ping sockets (`ping_group_range` decides). Not UDP-Lite.
const DGRAM_PROTOCOLS: [libc::c_int; 4] = [
    0,
    libc::IPPROTO_UDP,
    libc::IPPROTO_ICMP,
    libc::IPPROTO_ICMPV6,
];
/// `S_ISUID | S_ISGID`.
const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// Syscalls denied outright with `EPERM`.
fn denied_outright() -> Vec<libc::c_long> {
    #[cfg_attr(
        not(target_arch = "x86_64"),
        expect(unused_mut, reason = "the x86-64 legacy calls are added below")
    )]
    let mut v = vec![
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        // Sets the clock like clock_adjtime (with CAP_SYS_TIME); glibc's
        // adjtimex() calls clock_adjtime (2.36), so only a raw syscall
        // reaches this one.
        libc::SYS_adjtimex,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_fanotify_init,
        libc::SYS_quotactl,
        libc::SYS_quotactl_fd,
        libc::SYS_vhangup,
        libc::SYS_syslog,
        SYS_STATMOUNT,
        SYS_LISTMOUNT,
        SYS_OPEN_TREE_ATTR,
    ];
    // modify_ldt: a local descriptor table is 32-bit-segment attack surface
    // no 64-bit worker needs.
    #[cfg(target_arch = "x86_64")]
    v.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        libc::SYS_modify_ldt,
    ]);
    v
}

const CLONE_NEW_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// What the filter answers for a syscall number that has a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Eperm,
    Enosys,
    Args(ArgRule),
}

/// The syscalls whose answer depends on their arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgRule {
    /// `socket()`: only `AF_INET` and `AF_INET6` (no `AF_UNIX`,
    /// `AF_NETLINK`, `AF_PACKET`, `AF_VSOCK`, ...), only the stream and
    /// datagram types (no `SOCK_PACKET`, which the kernel turns into a
    /// packet socket, no `SOCK_SEQPACKET`, which is SCTP there, no
    /// `SOCK_RAW`), and only the protocols of [`STREAM_PROTOCOLS`] and
    /// [`DGRAM_PROTOCOLS`].
    Socket,
    /// `socketpair()`: `AF_UNIX` stream pairs only (datagram ends can be
    /// re-pointed at pathname sockets).
    Socketpair,
    /// `unshare()` with any `CLONE_NEW*` flag, `CLONE_NEWTIME` included.
    Unshare,
    /// `clone()` with any `CLONE_NEW*` flag (`CLONE_NEWTIME` shares its bit
    /// with the exit signal there).
    Clone,
    /// Nested sandbox ([`crate::Profile::allow_nested_sandbox`]): `socket()`
    /// as [`ArgRule::Socket`], plus `AF_UNIX` of the stream and seqpacket
    /// types (protocol 0). Landlock keeps socket files to `/tmp`.
    SocketNested,
    /// Nested sandbox: `socketpair()` as [`ArgRule::Socketpair`], plus
    /// `AF_UNIX` seqpacket pairs (Codex's app-server channel).
    SocketpairNested,
    /// Nested sandbox: `unshare()` with `CLONE_NEWTIME` only is refused;
    /// the other namespaces need `CLONE_NEWUSER` first for a worker without
    /// capabilities, which the kernel checks.
    UnshareNested,
    /// `ioctl(TIOCSTI)`, `ioctl(TIOCLINUX)` and `ioctl(TIOCSETD)`.
    Ioctl,
    /// `personality()`: only the query and plain Linux.
    Personality,
    /// `sendto`, `sendmsg`, `sendmmsg` with `MSG_FASTOPEN` in the flags at
    /// this argument: a TCP Fast Open send connects without `connect()`,
    /// where Landlock's TCP rule is checked.
    SendFlags(u32),
    /// `setsockopt(IPPROTO_TCP, TCP_FASTOPEN_CONNECT)`, and
    /// `setsockopt(IPPROTO_TCP, TCP_ULP)`: the `smc` upper layer turns an
    /// unconnected TCP socket into an SMC one, which Landlock's TCP rule
    /// does not check (the filter cannot read the name, so kTLS, `tls`, is
    /// refused too).
    Setsockopt,
    /// `S_ISUID` or `S_ISGID` in the mode at this argument (`chmod`,
    /// `fchmod`, `fchmodat`, `fchmodat2`, `creat`, `mknod`, `mknodat`).
    SetidMode(u32),
    /// `O_CREAT` or `O_TMPFILE` in the flags and `S_ISUID` or `S_ISGID` in
    /// the mode (`open`, `openat`).
    CreateSetid {
        /// The argument holding the open flags.
        flags: u32,
        /// The argument holding the creation mode.
        mode: u32,
    },
}

fn nr(n: libc::c_long) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("syscall number {n} out of range"))
}

/// The argument rules of the TCP Fast Open and set-id guards.
fn ruled_by_args() -> Vec<(libc::c_long, ArgRule)> {
    #[cfg_attr(
        not(target_arch = "x86_64"),
        expect(unused_mut, reason = "the x86-64 legacy calls are added below")
    )]
    let mut v = vec![
        (libc::SYS_sendto, ArgRule::SendFlags(3)),
        (libc::SYS_sendmsg, ArgRule::SendFlags(2)),
        (libc::SYS_sendmmsg, ArgRule::SendFlags(3)),
        (libc::SYS_setsockopt, ArgRule::Setsockopt),
        (libc::SYS_fchmod, ArgRule::SetidMode(1)),
        (libc::SYS_fchmodat, ArgRule::SetidMode(2)),
        (SYS_FCHMODAT2, ArgRule::SetidMode(2)),
        (libc::SYS_mknodat, ArgRule::SetidMode(2)),
        (libc::SYS_openat, ArgRule::CreateSetid { flags: 2, mode: 3 }),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, ArgRule::SetidMode(1)),
        (libc::SYS_creat, ArgRule::SetidMode(1)),
        (libc::SYS_mknod, ArgRule::SetidMode(1)),
        (libc::SYS_open, ArgRule::CreateSetid { flags: 1, mode: 2 }),
    ]);
    v
}

/// Every syscall number with a rule, sorted, each once. With `nested`
/// ([`crate::Profile::allow_nested_sandbox`]) `socket`, `socketpair` and
/// `unshare` take their nested rules and `clone` is allowed (the kernel
/// refuses a namespace other than a user namespace to a caller without
/// capabilities; `CLONE_NEWTIME` is not a `clone` flag).
fn table(nested: bool) -> Result<Vec<(u32, Verdict)>, String> {
    let mut t: Vec<(u32, Verdict)> = Vec::new();
    for n in denied_outright() {
        t.push((nr(n)?, Verdict::Eperm));
    }
    t.push((nr(libc::SYS_clone3)?, Verdict::Enosys));
    // openat2's flags and mode sit in a struct the filter cannot read.
    t.push((nr(libc::SYS_openat2)?, Verdict::Enosys));
    let (socket, pair, unshare) = if nested {
        (
            ArgRule::SocketNested,
            ArgRule::SocketpairNested,
            ArgRule::UnshareNested,
        )
    } else {
        (ArgRule::Socket, ArgRule::Socketpair, ArgRule::Unshare)
    };
    t.push((nr(libc::SYS_socket)?, Verdict::Args(socket)));
    t.push((nr(libc::SYS_socketpair)?, Verdict::Args(pair)));
    t.push((nr(libc::SYS_unshare)?, Verdict::Args(unshare)));
    if !nested {
        t.push((nr(libc::SYS_clone)?, Verdict::Args(ArgRule::Clone)));
    }
    t.push((nr(libc::SYS_ioctl)?, Verdict::Args(ArgRule::Ioctl)));
    t.push((
        nr(libc::SYS_personality)?,
        Verdict::Args(ArgRule::Personality),
    ));
    for (n, rule) in ruled_by_args() {
        t.push((nr(n)?, Verdict::Args(rule)));
    }
    t.sort_by_key(|(n, _)| *n);
    if t.windows(2).any(|w| matches!(w, [a, b] if a.0 == b.0)) {
        return Err(String::from("a syscall number has two rules"));
    }
    Ok(t)
}

/// A jump target while the program is assembled.
#[derive(Debug, Clone, Copy)]
enum Target {
    Next,
    Label(usize),
}

/// One assembler item: an instruction with symbolic targets, or a label.
#[derive(Debug, Clone, Copy)]
enum Item {
    Ld(u32),
    And(u32),
    Ret(u32),
    Jump {
        code: u16,
        k: u32,
        jt: Target,
        jf: Target,
    },
    Ja(usize),
    Label(usize),
}

/// A tiny assembler: labels and symbolic jumps, resolved into offsets that
/// are checked to fit (a conditional jump reaches at most 255 ahead).
#[derive(Debug, Default)]
struct Asm {
    items: Vec<Item>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }

    fn push(&mut self, item: Item) {
        self.items.push(item);
    }

    fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.push(Item::Jump { code, k, jt, jf });
    }

    fn finish(self) -> Result<Vec<sock_filter>, String> {
        let mut at = vec![None; self.labels];
        let mut pc = 0usize;
        for item in &self.items {
            match item {
                Item::Label(l) => {
                    if let Some(slot) = at.get_mut(*l) {
                        *slot = Some(pc);
                    }
                }
                _ => pc += 1,
            }
        }
        if pc > usize::from(u16::MAX) {
            return Err(format!("seccomp program too long ({pc} instructions)"));
        }
        let resolve = |pc: usize, t: Target| -> Result<usize, String> {
            match t {
                Target::Next => Ok(0),
                Target::Label(l) => at
                    .get(l)
                    .copied()
                    .flatten()
                    .and_then(|dest| dest.checked_sub(pc + 1))
                    .ok_or_else(|| format!("seccomp label {l} is not ahead of {pc}")),
            }
        };
        let short = |off: usize| {
            u8::try_from(off).map_err(|_| format!("seccomp jump of {off} does not fit"))
        };
        let mut out = Vec::with_capacity(pc);
        for item in self.items {
            let pc = out.len();
            let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
            match item {
                Item::Label(_) => continue,
                Item::Ld(off) => out.push(insn(BPF_LD_W_ABS, 0, 0, off)),
                Item::And(k) => out.push(insn(BPF_ALU_AND_K, 0, 0, k)),
                Item::Ret(k) => out.push(insn(BPF_RET_K, 0, 0, k)),
                Item::Ja(l) => {
                    let off = resolve(pc, Target::Label(l))?;
                    let k = u32::try_from(off).map_err(|_| String::from("seccomp ja too far"))?;
                    out.push(insn(BPF_JA, 0, 0, k));
                }
                Item::Jump { code, k, jt, jf } => {
                    let jt = short(resolve(pc, jt)?)?;
                    let jf = short(resolve(pc, jf)?)?;
                    out.push(insn(code, jt, jf, k));
                }
            }
        }
        Ok(out)
    }
}

/// The search tree over `keys` (sorted); the accumulator holds the number.
fn search(
    asm: &mut Asm,
    keys: &[(u32, Verdict)],
    blocks: &[(ArgRule, usize)],
) -> Result<(), String> {
    if keys.len() <= LEAF {
        for (n, verdict) in keys {
            let miss = asm.label();
            asm.jump(BPF_JEQ_K, *n, Target::Next, Target::Label(miss));
            match verdict {
                Verdict::Eperm => asm.push(Item::Ret(RET_EPERM)),
                Verdict::Enosys => asm.push(Item::Ret(RET_ENOSYS)),
                Verdict::Args(rule) => {
                    let block = blocks
                        .iter()
                        .find(|(r, _)| r == rule)
                        .map(|(_, l)| *l)
                        .ok_or("an argument rule without a block")?;
                    asm.push(Item::Ja(block));
                }
            }
            asm.push(Item::Label(miss));
        }
        asm.push(Item::Ret(RET_ALLOW));
        return Ok(());
    }
    let mid = keys.len() / 2;
    let (left, right) = keys.split_at(mid);
    let Some((pivot, _)) = right.first() else {
        return Err(String::from("empty half of the search tree"));
    };
    let upper = asm.label();
    asm.jump(BPF_JGE_K, *pivot, Target::Label(upper), Target::Next);
    search(asm, left, blocks)?;
    asm.push(Item::Label(upper));
    search(asm, right, blocks)
}

fn mask(flags: &[u64]) -> Result<u32, String> {
    let m = flags.iter().fold(0u64, |acc, f| acc | f);
    u32::try_from(m).map_err(|_| String::from("a CLONE_NEW* flag above bit 31"))
}

/// The block of one argument rule, starting at its label. `allow` and
/// `eperm` are shared returns at the end of the program.
fn block(asm: &mut Asm, rule: ArgRule, allow: usize, eperm: usize) -> Result<(), String> {
    let (yes, no) = (Target::Label(eperm), Target::Next);
    let af = |v: libc::c_int| u32::try_from(v).map_err(|_| String::from("negative constant"));
    match rule {
        ArgRule::Socket | ArgRule::SocketNested => {
            let (inet, stream, dgram) = (asm.label(), asm.label(), asm.label());
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JEQ_K, af(libc::AF_INET)?, Target::Label(inet), no);
            asm.jump(BPF_JEQ_K, af(libc::AF_INET6)?, Target::Label(inet), no);
            if rule == ArgRule::SocketNested {
                unix_socket(asm, allow)?;
            }
            asm.push(Item::Ret(RET_EPERM));
            // The type without SOCK_NONBLOCK / SOCK_CLOEXEC.
            asm.push(Item::Label(inet));
            asm.push(Item::Ld(off_arg(1)));
            asm.push(Item::And(SOCK_TYPE_MASK));
            asm.jump(BPF_JEQ_K, af(libc::SOCK_STREAM)?, Target::Label(stream), no);
            asm.jump(BPF_JEQ_K, af(libc::SOCK_DGRAM)?, Target::Label(dgram), no);
            asm.push(Item::Ret(RET_EPERM));
            for (label, protocols) in [
                (stream, &STREAM_PROTOCOLS[..]),
                (dgram, &DGRAM_PROTOCOLS[..]),
            ] {
                asm.push(Item::Label(label));
                asm.push(Item::Ld(off_arg(2)));
                for p in protocols {
                    asm.jump(BPF_JEQ_K, af(*p)?, Target::Label(allow), no);
                }
                asm.push(Item::Ret(RET_EPERM));
            }
        }
        ArgRule::Socketpair | ArgRule::SocketpairNested => {
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JEQ_K, af(libc::AF_UNIX)?, no, yes);
            // The type without SOCK_NONBLOCK / SOCK_CLOEXEC.
            asm.push(Item::Ld(off_arg(1)));
            asm.push(Item::And(0xf));
            asm.jump(BPF_JEQ_K, af(libc::SOCK_DGRAM)?, yes, no);
            if rule == ArgRule::Socketpair {
                asm.jump(BPF_JEQ_K, af(libc::SOCK_SEQPACKET)?, yes, no);
            }
            asm.jump(BPF_JEQ_K, af(libc::SOCK_RAW)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::UnshareNested => {
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JSET_K, mask(&[libc::CLONE_NEWTIME as u64])?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::Unshare => {
            let mut flags = CLONE_NEW_FLAGS.to_vec();
            flags.push(libc::CLONE_NEWTIME as u64);
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JSET_K, mask(&flags)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::Clone => {
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JSET_K, mask(&CLONE_NEW_FLAGS)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::Ioctl => {
            let req = |v: libc::c_ulong| {
                u32::try_from(v).map_err(|_| String::from("ioctl request above 32 bits"))
            };
            asm.push(Item::Ld(off_arg(1)));
            asm.jump(BPF_JEQ_K, req(libc::TIOCSTI)?, yes, no);
            asm.jump(BPF_JEQ_K, req(libc::TIOCLINUX)?, yes, no);
            asm.jump(BPF_JEQ_K, req(libc::TIOCSETD)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::Personality => {
            asm.push(Item::Ld(off_arg(0)));
            asm.jump(BPF_JEQ_K, 0, Target::Label(allow), no);
            asm.jump(BPF_JEQ_K, 0xffff_ffff, Target::Label(allow), no);
            asm.push(Item::Ret(RET_EPERM));
        }
        ArgRule::SendFlags(arg) => {
            asm.push(Item::Ld(off_arg(arg)));
            asm.jump(BPF_JSET_K, af(libc::MSG_FASTOPEN)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::Setsockopt => {
            asm.push(Item::Ld(off_arg(1)));
            asm.jump(BPF_JEQ_K, af(libc::IPPROTO_TCP)?, no, Target::Label(allow));
            asm.push(Item::Ld(off_arg(2)));
            asm.jump(BPF_JEQ_K, af(libc::TCP_FASTOPEN_CONNECT)?, yes, no);
            asm.jump(BPF_JEQ_K, af(libc::TCP_ULP)?, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::SetidMode(arg) => {
            asm.push(Item::Ld(off_arg(arg)));
            asm.jump(BPF_JSET_K, SETID_BITS, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
        ArgRule::CreateSetid { flags, mode } => {
            // O_TMPFILE without the O_DIRECTORY it includes.
            let creating = af(libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY))?;
            asm.push(Item::Ld(off_arg(flags)));
            asm.jump(BPF_JSET_K, creating, no, Target::Label(allow));
            asm.push(Item::Ld(off_arg(mode)));
            asm.jump(BPF_JSET_K, SETID_BITS, yes, no);
            asm.push(Item::Ret(RET_ALLOW));
        }
    }
    Ok(())
}

/// The nested-sandbox part of the `socket()` block, reached with the
/// family in A when it is neither `AF_INET` nor `AF_INET6`: `AF_UNIX` of
/// the stream or seqpacket type with protocol 0 is allowed; anything else
/// falls through to the block's refusal.
fn unix_socket(asm: &mut Asm, allow: usize) -> Result<(), String> {
    let af = |v: libc::c_int| u32::try_from(v).map_err(|_| String::from("negative constant"));
    let (unix, typed, refuse) = (asm.label(), asm.label(), asm.label());
    asm.jump(
        BPF_JEQ_K,
        af(libc::AF_UNIX)?,
        Target::Label(unix),
        Target::Label(refuse),
    );
    asm.push(Item::Label(unix));
    asm.push(Item::Ld(off_arg(1)));
    asm.push(Item::And(SOCK_TYPE_MASK));
    asm.jump(
        BPF_JEQ_K,
        af(libc::SOCK_STREAM)?,
        Target::Label(typed),
        Target::Next,
    );
    asm.jump(
        BPF_JEQ_K,
        af(libc::SOCK_SEQPACKET)?,
        Target::Label(typed),
        Target::Label(refuse),
    );
    asm.push(Item::Label(typed));
    asm.push(Item::Ld(off_arg(2)));
    asm.jump(BPF_JEQ_K, 0, Target::Label(allow), Target::Label(refuse));
    asm.push(Item::Label(refuse));
    Ok(())
}

/// Build the filter of a profile; `nested` is
/// [`crate::Profile::nested_sandbox`].
pub(crate) fn build(nested: bool) -> Result<Filters, String> {
    let arch = audit_arch()?;
    let keys = table(nested)?;
    let mut asm = Asm::default();
    let (allow, eperm) = (asm.label(), asm.label());
    // One block per argument rule of the table, each behind its own label.
    let mut rules: Vec<ArgRule> = Vec::new();
    for (_, v) in &keys {
        if let Verdict::Args(rule) = v
            && !rules.contains(rule)
        {
            rules.push(*rule);
        }
    }
    let blocks: Vec<(ArgRule, usize)> = rules.into_iter().map(|r| (r, asm.label())).collect();
    // A = seccomp_data.arch; another ABI is killed.
    let native = asm.label();
    asm.push(Item::Ld(OFF_ARCH));
    asm.jump(BPF_JEQ_K, arch, Target::Label(native), Target::Next);
    asm.push(Item::Ret(RET_KILL_PROCESS));
    asm.push(Item::Label(native));
    // A = seccomp_data.nr; the x32 bit is refused, a number newer than
    // the table is not implemented.
    let (plain, known) = (asm.label(), asm.label());
    asm.push(Item::Ld(OFF_NR));
    asm.jump(BPF_JGE_K, X32_BIT, Target::Next, Target::Label(plain));
    asm.push(Item::Ret(RET_EPERM));
    asm.push(Item::Label(plain));
    asm.jump(BPF_JGE_K, LAST_NR + 1, Target::Next, Target::Label(known));
    asm.push(Item::Ret(RET_ENOSYS));
    asm.push(Item::Label(known));
    search(&mut asm, &keys, &blocks)?;
    for (rule, label) in &blocks {
        asm.push(Item::Label(*label));
        block(&mut asm, *rule, allow, eperm)?;
    }
    asm.push(Item::Label(allow));
    asm.push(Item::Ret(RET_ALLOW));
    asm.push(Item::Label(eperm));
    asm.push(Item::Ret(RET_EPERM));
    Ok(Filters {
        program: asm.finish()?,
    })
}

/// Install the filter on the calling thread (`no_new_privs` must be set).
pub(crate) fn install(filters: &Filters) -> Result<(), i32> {
    crate::sys::seccomp_install(&filters.program)
}

#[cfg(test)]
mod tests {
    use super::*;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;

    fn target_arch() -> TargetArch {
        if cfg!(target_arch = "x86_64") {
            TargetArch::x86_64
        } else if cfg!(target_arch = "aarch64") {
            TargetArch::aarch64
        } else {
            TargetArch::riscv64
        }
    }

    /// The hand-written head of the former program: the architecture check,
    /// the x32 guard, numbers above the table, and `clone3` and `openat2`
    /// → `ENOSYS`.
    fn reference_head(audit_arch: u32) -> Vec<sock_filter> {
        let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        let clone3 = u32::try_from(libc::SYS_clone3).unwrap();
        let openat2 = u32::try_from(libc::SYS_openat2).unwrap();
        vec![
            insn(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
            insn(BPF_JEQ_K, 1, 0, audit_arch),
            insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
            insn(BPF_LD_W_ABS, 0, 0, OFF_NR),
            insn(BPF_JGE_K, 0, 1, X32_BIT),
            insn(BPF_RET_K, 0, 0, RET_EPERM),
            insn(BPF_JGE_K, 0, 1, 470),
            insn(BPF_RET_K, 0, 0, RET_ENOSYS),
            insn(BPF_JEQ_K, 0, 1, clone3),
            insn(BPF_RET_K, 0, 0, RET_ENOSYS),
            insn(BPF_JEQ_K, 0, 1, openat2),
            insn(BPF_RET_K, 0, 0, RET_ENOSYS),
        ]
    }

    fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    }

    fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
        SeccompRule::new(conds).map_err(|e| e.to_string())
    }

    /// The filter as session 1 built it with `seccompiler` (a linear chain):
    /// the oracle the generated program must agree with.
    fn reference() -> Result<Vec<sock_filter>, String> {
        let (arch, audit_arch) = (target_arch(), audit_arch()?);
        let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for nr in denied_outright() {
            deny.insert(nr, Vec::new());
        }
        // socket(): only AF_INET and AF_INET6 (no AF_UNIX, AF_NETLINK, AF_PACKET,
        // AF_VSOCK, ...). Dword compares the low 32 bits: high bits in the
        // domain argument do not help.
        deny.insert(
            libc::SYS_socket,
            vec![rule(vec![
                cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
                cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
            ])?],
        );
        // Only the stream and datagram types (SOCK_PACKET is 10, whatever
        // the flags), each with its protocols.
        let socket_rules = deny.entry(libc::SYS_socket).or_default();
        for t in (0..16).filter(|t| ![libc::SOCK_STREAM, libc::SOCK_DGRAM].contains(t)) {
            socket_rules.push(rule(vec![cond(1, SeccompCmpOp::MaskedEq(0xf), t as u64)?])?);
        }
        for (t, protocols) in [
            (libc::SOCK_STREAM, &STREAM_PROTOCOLS[..]),
            (libc::SOCK_DGRAM, &DGRAM_PROTOCOLS[..]),
        ] {
            let mut conds = vec![cond(1, SeccompCmpOp::MaskedEq(0xf), t as u64)?];
            for p in protocols {
                conds.push(cond(2, SeccompCmpOp::Ne, *p as u64)?);
            }
            socket_rules.push(rule(conds)?);
        }
        // socketpair(AF_UNIX): stream only (datagram ends can be re-pointed at
        // pathname sockets).
        let type_mask = 0xf;
        deny.insert(
            libc::SYS_socketpair,
            vec![
                rule(vec![cond(
                    1,
                    SeccompCmpOp::MaskedEq(type_mask),
                    libc::SOCK_DGRAM as u64,
                )?])?,
                rule(vec![cond(
                    1,
                    SeccompCmpOp::MaskedEq(type_mask),
                    libc::SOCK_SEQPACKET as u64,
                )?])?,
                rule(vec![cond(
                    1,
                    SeccompCmpOp::MaskedEq(type_mask),
                    libc::SOCK_RAW as u64,
                )?])?,
                rule(vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?])?,
            ],
        );
        // unshare / clone with any CLONE_NEW* flag.
        let mut ns_rules = Vec::new();
        for f in CLONE_NEW_FLAGS {
            ns_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(f), f)?])?);
        }
        let mut unshare_rules = ns_rules.clone();
        unshare_rules.push(rule(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWTIME as u64),
            libc::CLONE_NEWTIME as u64,
        )?])?);
        deny.insert(libc::SYS_unshare, unshare_rules);
        deny.insert(libc::SYS_clone, ns_rules);
        // ioctl(TIOCSTI / TIOCLINUX), 32-bit comparison of the request.
        deny.insert(
            libc::SYS_ioctl,
            vec![
                rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSTI)?])?,
                rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCLINUX)?])?,
                rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSETD)?])?,
            ],
        );
        // TCP Fast Open: MSG_FASTOPEN in the send flags, and the socket
        // option that defers connect() to the first write.
        let fastopen = libc::MSG_FASTOPEN as u64;
        for (nr, arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            deny.insert(
                nr,
                vec![rule(vec![cond(
                    arg,
                    SeccompCmpOp::MaskedEq(fastopen),
                    fastopen,
                )?])?],
            );
        }
        deny.insert(
            libc::SYS_setsockopt,
            vec![
                rule(vec![
                    cond(1, SeccompCmpOp::Eq, 6)?,
                    cond(2, SeccompCmpOp::Eq, 30)?,
                ])?,
                // TCP_ULP.
                rule(vec![
                    cond(1, SeccompCmpOp::Eq, 6)?,
                    cond(2, SeccompCmpOp::Eq, 31)?,
                ])?,
            ],
        );
        // Set-id modes (systemd's RestrictSUIDSGID=), each bit on its own.
        let setid = |arg: u8| -> Result<Vec<SeccompRule>, String> {
            [0o4000, 0o2000]
                .into_iter()
                .map(|bit| rule(vec![cond(arg, SeccompCmpOp::MaskedEq(bit), bit)?]))
                .collect()
        };
        #[cfg_attr(
            not(target_arch = "x86_64"),
            expect(unused_mut, reason = "the x86-64 legacy calls are added below")
        )]
        let mut setid_calls = vec![
            (libc::SYS_fchmod, 1),
            (libc::SYS_fchmodat, 2),
            (SYS_FCHMODAT2, 2),
            (libc::SYS_mknodat, 2),
        ];
        #[cfg(target_arch = "x86_64")]
        setid_calls.extend([
            (libc::SYS_chmod, 1),
            (libc::SYS_creat, 1),
            (libc::SYS_mknod, 1),
        ]);
        for (nr, arg) in setid_calls {
            deny.insert(nr, setid(arg)?);
        }
        // open/openat creating (O_CREAT 0o100, __O_TMPFILE 0o20000000) a
        // set-id file.
        let create_setid = |flags: u8, mode: u8| -> Result<Vec<SeccompRule>, String> {
            let mut rules = Vec::new();
            for create in [0o100, 0o2000_0000] {
                for bit in [0o4000, 0o2000] {
                    rules.push(rule(vec![
                        cond(flags, SeccompCmpOp::MaskedEq(create), create)?,
                        cond(mode, SeccompCmpOp::MaskedEq(bit), bit)?,
                    ])?);
                }
            }
            Ok(rules)
        };
        deny.insert(libc::SYS_openat, create_setid(2, 3)?);
        #[cfg(target_arch = "x86_64")]
        deny.insert(libc::SYS_open, create_setid(1, 2)?);
        // personality(): only the query and plain Linux.
        deny.insert(
            libc::SYS_personality,
            vec![rule(vec![
                cond(0, SeccompCmpOp::Ne, 0)?,
                cond(0, SeccompCmpOp::Ne, 0xffff_ffff)?,
            ])?],
        );
        let deny_filter = SeccompFilter::new(
            deny,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(|e| e.to_string())?;
        let deny_prog: seccompiler::BpfProgram = deny_filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?;
        let mut program = reference_head(audit_arch);
        program.extend(deny_prog.into_iter().map(|i| sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }));
        Ok(program)
    }

    /// Run the classic BPF program on a `seccomp_data` (only the loads,
    /// jumps and returns the program uses).
    fn run(prog: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&nr.to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let mut a: u32 = 0;
        let mut pc = 0usize;
        for _ in 0..10_000 {
            let i = &prog[pc];
            match i.code {
                0x20 => {
                    let o = i.k as usize;
                    a = u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
                    pc += 1;
                }
                0x06 => return i.k,
                0x54 => {
                    a &= i.k;
                    pc += 1;
                }
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let t = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += 1 + usize::from(if t { i.jt } else { i.jf });
                }
                0x05 => pc += 1 + i.k as usize,
                c => panic!("instruction {c:#x} not emulated"),
            }
        }
        panic!("no return")
    }

    #[test]
    fn the_nested_program_allows_exactly_the_nested_sandbox_calls() {
        let arch = audit_arch().unwrap();
        let nr = |n: libc::c_long| u32::try_from(n).unwrap();
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let c = |v: libc::c_int| u64::try_from(v).unwrap();
        let user = libc::CLONE_NEWUSER as u64;
        let ns = user | (libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET) as u64;
        let time = libc::CLONE_NEWTIME as u64;
        let (unix, stream, seq) = (
            c(libc::AF_UNIX),
            c(libc::SOCK_STREAM),
            c(libc::SOCK_SEQPACKET),
        );
        let plain = build(false).unwrap().program;
        let nested = build(true).unwrap().program;
        let cases: [(libc::c_long, [u64; 6], u32, u32); 14] = [
            (libc::SYS_unshare, [user, 0, 0, 0, 0, 0], eperm, RET_ALLOW),
            (libc::SYS_unshare, [ns, 0, 0, 0, 0, 0], eperm, RET_ALLOW),
            (libc::SYS_unshare, [time, 0, 0, 0, 0, 0], eperm, eperm),
            (libc::SYS_clone, [ns, 0, 0, 0, 0, 0], eperm, RET_ALLOW),
            (
                libc::SYS_socket,
                [unix, stream, 0, 0, 0, 0],
                eperm,
                RET_ALLOW,
            ),
            (
                libc::SYS_socket,
                [unix, seq | c(libc::SOCK_CLOEXEC), 0, 0, 0, 0],
                eperm,
                RET_ALLOW,
            ),
            (
                libc::SYS_socket,
                [unix, c(libc::SOCK_DGRAM), 0, 0, 0, 0],
                eperm,
                eperm,
            ),
            (libc::SYS_socket, [unix, stream, 1, 0, 0, 0], eperm, eperm),
            (
                libc::SYS_socket,
                [c(libc::AF_NETLINK), c(libc::SOCK_RAW), 0, 0, 0, 0],
                eperm,
                eperm,
            ),
            (
                libc::SYS_socketpair,
                [unix, seq, 0, 0, 0, 0],
                eperm,
                RET_ALLOW,
            ),
            (
                libc::SYS_socketpair,
                [unix, stream, 0, 0, 0, 0],
                RET_ALLOW,
                RET_ALLOW,
            ),
            (
                libc::SYS_socketpair,
                [unix, c(libc::SOCK_DGRAM), 0, 0, 0, 0],
                eperm,
                eperm,
            ),
            (
                libc::SYS_socket,
                [c(libc::AF_INET), stream, 0, 0, 0, 0],
                RET_ALLOW,
                RET_ALLOW,
            ),
            (libc::SYS_getpid, [0; 6], RET_ALLOW, RET_ALLOW),
        ];
        for (n, args, want_plain, want_nested) in cases {
            assert_eq!(
                run(&plain, nr(n), arch, args),
                want_plain,
                "plain {n} {args:?}"
            );
            assert_eq!(
                run(&nested, nr(n), arch, args),
                want_nested,
                "nested {n} {args:?}"
            );
        }
        // The rest of the filter is kept.
        for n in [
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_setns,
            libc::SYS_ptrace,
            libc::SYS_keyctl,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_io_uring_setup,
        ] {
            assert_eq!(run(&nested, nr(n), arch, [0; 6]), eperm, "nested {n}");
        }
        assert_eq!(run(&nested, nr(libc::SYS_clone3), arch, [0; 6]), RET_ENOSYS);
    }

    #[test]
    fn the_program_answers_the_spec_cases() {
        let f = build(false).unwrap();
        let arch = audit_arch().unwrap();
        let nr = |n: libc::c_long| u32::try_from(n).unwrap();
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let allow = 0x7fff_0000;
        // Another ABI is killed before anything else is looked at.
        assert_eq!(
            run(&f.program, nr(libc::SYS_getpid), 0x4000_0003, [0; 6]),
            RET_KILL_PROCESS
        );
        // x32 numbers: EPERM, even for a syscall the deny list allows.
        assert_eq!(
            run(&f.program, X32_BIT | nr(libc::SYS_getpid), arch, [0; 6]),
            eperm
        );
        // clone3: ENOSYS.
        assert_eq!(
            run(&f.program, nr(libc::SYS_clone3), arch, [0; 6]),
            RET_ERRNO | libc::ENOSYS as u32
        );
        // The deny list still answers: mount, AF_UNIX socket, high bits.
        assert_eq!(run(&f.program, nr(libc::SYS_mount), arch, [0; 6]), eperm);
        assert_eq!(
            run(&f.program, nr(libc::SYS_socket), arch, [1, 1, 0, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(
                &f.program,
                nr(libc::SYS_socket),
                arch,
                [(1 << 32) | 1, 1, 0, 0, 0, 0]
            ),
            eperm
        );
        // TCP Fast Open, SOCK_PACKET, TIOCSETD, set-id modes, the mount
        // readers, openat2 and numbers newer than the table.
        let fastopen = libc::MSG_FASTOPEN as u64;
        let sendto = nr(libc::SYS_sendto);
        assert_eq!(
            run(&f.program, sendto, arch, [3, 0, 1, fastopen, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, sendto, arch, [3, 0, 1, 0x4000, 0, 0]),
            allow
        );
        let sendmsg = nr(libc::SYS_sendmsg);
        assert_eq!(
            run(&f.program, sendmsg, arch, [3, 0, fastopen, 0, 0, 0]),
            eperm
        );
        let sendmmsg = nr(libc::SYS_sendmmsg);
        assert_eq!(
            run(&f.program, sendmmsg, arch, [3, 0, 1, fastopen, 0, 0]),
            eperm
        );
        let setsockopt = nr(libc::SYS_setsockopt);
        assert_eq!(
            run(&f.program, setsockopt, arch, [3, 6, 30, 0, 4, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, setsockopt, arch, [3, 6, 31, 0, 4, 0]),
            eperm
        );
        assert_eq!(run(&f.program, setsockopt, arch, [3, 6, 1, 0, 4, 0]), allow);
        assert_eq!(
            run(&f.program, setsockopt, arch, [3, 1, 30, 0, 4, 0]),
            allow
        );
        let socket = nr(libc::SYS_socket);
        assert_eq!(run(&f.program, socket, arch, [2, 10, 0, 0, 0, 0]), eperm);
        assert_eq!(run(&f.program, socket, arch, [2, 0x80a, 0, 0, 0, 0]), eperm);
        // Only TCP streams and UDP (and ping) datagrams: no MPTCP (262),
        // SCTP (132, and SOCK_SEQPACKET's default), SMC (256), UDP-Lite
        // (136), raw sockets; high bits do not change the protocol.
        for (ty, proto) in [
            (1, 262),
            (1, 132),
            (1, 256),
            (5, 0),
            (3, 0),
            (2, 136),
            (1, 17),
        ] {
            for domain in [2, 10] {
                assert_eq!(
                    run(&f.program, socket, arch, [domain, ty, proto, 0, 0, 0]),
                    eperm,
                    "socket({domain}, {ty}, {proto})"
                );
            }
        }
        assert_eq!(
            run(
                &f.program,
                socket,
                arch,
                [2, 0x80001, 262 | (1 << 32), 0, 0, 0]
            ),
            eperm
        );
        for (ty, proto) in [
            (1, 0),
            (1, 6),
            (0x80801, 6 | (1 << 32)),
            (2, 0),
            (2, 17),
            (2, 1),
            (2, 58),
        ] {
            assert_eq!(
                run(&f.program, socket, arch, [10, ty, proto, 0, 0, 0]),
                allow,
                "socket(10, {ty:#x}, {proto:#x})"
            );
        }
        let ioctl = nr(libc::SYS_ioctl);
        assert_eq!(
            run(&f.program, ioctl, arch, [0, libc::TIOCSETD, 0, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, ioctl, arch, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]),
            allow
        );
        let fchmodat = nr(libc::SYS_fchmodat);
        assert_eq!(
            run(&f.program, fchmodat, arch, [0, 0, 0o4755, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, fchmodat, arch, [0, 0, 0o2755, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, fchmodat, arch, [0, 0, 0o1777, 0, 0, 0]),
            allow
        );
        let openat = nr(libc::SYS_openat);
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        assert_eq!(
            run(&f.program, openat, arch, [0, 0, creat, 0o4755, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&f.program, openat, arch, [0, 0, creat, 0o755, 0, 0]),
            allow
        );
        // Without O_CREAT the mode argument is ignored by the kernel.
        assert_eq!(
            run(&f.program, openat, arch, [0, 0, 0, 0o4755, 0, 0]),
            allow
        );
        let tmpfile = (libc::O_TMPFILE | libc::O_RDWR) as u64;
        assert_eq!(
            run(&f.program, openat, arch, [0, 0, tmpfile, 0o2755, 0, 0]),
            eperm
        );
        for n in [
            SYS_STATMOUNT,
            SYS_LISTMOUNT,
            SYS_OPEN_TREE_ATTR,
            libc::SYS_quotactl_fd,
        ] {
            assert_eq!(run(&f.program, nr(n), arch, [0; 6]), eperm, "{n}");
        }
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        assert_eq!(run(&f.program, nr(libc::SYS_openat2), arch, [0; 6]), enosys);
        assert_eq!(run(&f.program, LAST_NR + 1, arch, [0; 6]), enosys);
        // Positive controls: ordinary calls and AF_INET sockets pass.
        assert_eq!(run(&f.program, nr(libc::SYS_getpid), arch, [0; 6]), allow);
        assert_eq!(
            run(&f.program, nr(libc::SYS_socket), arch, [2, 1, 0, 0, 0, 0]),
            allow
        );
        assert_eq!(
            run(&f.program, nr(libc::SYS_clone), arch, [0x11, 0, 0, 0, 0, 0]),
            allow
        );
    }

    /// Argument values that exercise every comparison of the filter: the
    /// constants it compares with, with and without flag bits, neighbours,
    /// and high bits above the low word.
    fn interesting() -> Vec<u64> {
        let mut v: Vec<u64> = vec![
            0,
            1,
            2,
            3,
            5,
            10,
            16,
            0x11,
            0x7f,
            0xffff,
            0xffff_ffff,
            u64::MAX,
        ];
        v.extend(
            [
                libc::AF_UNIX,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_NETLINK,
                libc::AF_PACKET,
            ]
            .map(|x| x as u64),
        );
        for t in [
            libc::SOCK_STREAM,
            libc::SOCK_DGRAM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_RAW,
        ] {
            v.push(t as u64);
            v.push((t | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64);
        }
        for f in CLONE_NEW_FLAGS {
            v.push(f);
            v.push(f | 0x11);
        }
        v.push(libc::CLONE_NEWTIME as u64);
        v.push((libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_THREAD) as u64);
        v.extend([
            libc::TIOCSTI,
            libc::TIOCLINUX,
            libc::TIOCSETD,
            libc::TIOCGETD,
            libc::TCGETS,
            libc::TCSETS,
            libc::TIOCGWINSZ,
            libc::FIONREAD,
        ]);
        // Send flags and socket options: IPPROTO_TCP is 6, TCP_FASTOPEN 23,
        // TCP_FASTOPEN_CONNECT 30, TCP_ULP 31; SOCK_PACKET is 10 (above). Protocols:
        // UDP 17, ICMPv6 58, SCTP 132, UDP-Lite 136, SMC 256, MPTCP 262.
        v.extend([6, 23, 30, 31, 17, 58, 132, 136, 256, 262]);
        for f in [0, libc::MSG_NOSIGNAL, libc::MSG_DONTWAIT] {
            v.push(f as u64);
            v.push((f | libc::MSG_FASTOPEN) as u64);
        }
        // Open flags and modes.
        for f in [
            libc::O_RDONLY,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            libc::O_TMPFILE | libc::O_RDWR,
            libc::O_DIRECTORY,
        ] {
            v.push(f as u64);
        }
        for m in [0o644, 0o755, 0o1777, 0o2755, 0o4755, 0o6755] {
            v.push(m);
            v.push(u64::from(libc::S_IFREG) | m);
        }
        let high: Vec<u64> = v.iter().map(|x| x | (1 << 32)).collect();
        v.extend(high);
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn the_search_tree_answers_like_the_linear_chain() {
        let new = build(false).unwrap().program;
        let old = reference().unwrap();
        let arch = audit_arch().unwrap();
        let vals = interesting();
        let ruled: Vec<u32> = table(false).unwrap().iter().map(|(n, _)| *n).collect();
        let mut numbers: Vec<u32> = (0..=600).collect();
        numbers.extend([X32_BIT, X32_BIT | 1, X32_BIT | 41, 0x7fff_ffff, u32::MAX]);
        let mut compared = 0u64;
        for a in [arch, 0x4000_0003, 0] {
            for &n in &numbers {
                let grid: Vec<[u64; 6]> = if ruled.contains(&n) && a == arch {
                    vals.iter()
                        .flat_map(|&x| vals.iter().map(move |&y| [x, y, x, y, 0, 0]))
                        .collect()
                } else {
                    vec![[0; 6], [1, 1, 0, 0, 0, 0], [u64::MAX; 6]]
                };
                for args in grid {
                    assert_eq!(
                        run(&new, n, a, args),
                        run(&old, n, a, args),
                        "syscall {n} arch {a:#x} args {args:x?}"
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 100_000, "only {compared} cases compared");
    }

    #[test]
    fn the_socket_rule_answers_like_the_linear_chain() {
        // The grid above repeats the domain as the protocol; here every
        // domain, type and protocol of interest is combined.
        let new = build(false).unwrap().program;
        let old = reference().unwrap();
        let arch = audit_arch().unwrap();
        let socket = u32::try_from(libc::SYS_socket).unwrap();
        let domains = [0, 1, 2, 10, 16, 17, 40, 44, (1 << 32) | 2, u64::MAX];
        let mut types: Vec<u64> = (0..16).collect();
        types.extend([0x80001, 0x802, 0x8000a, (1 << 32) | 1, u64::MAX]);
        let mut protocols: Vec<u64> = vec![0, 1, 6, 17, 58, 115, 132, 136, 255, 256, 262];
        protocols.extend([(1 << 32) | 6, (1 << 32) | 262, 0xffff_ffff, u64::MAX]);
        let mut allowed = 0;
        for &d in &domains {
            for &t in &types {
                for &p in &protocols {
                    let args = [d, t, p, 0, 0, 0];
                    let answer = run(&new, socket, arch, args);
                    assert_eq!(answer, run(&old, socket, arch, args), "socket{args:x?}");
                    allowed += usize::from(answer == RET_ALLOW);
                }
            }
        }
        // 2 domains (and one with high bits) x 2 plain types (and their
        // flagged forms) x the allowed protocols (and their high-bit forms).
        assert!(allowed > 20, "only {allowed} socket calls allowed");
    }

    /// `(libc::SYS_x, "SYS_x")` pairs.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    macro_rules! named {
        ($($n:ident),* $(,)?) => { [$((libc::$n, stringify!($n))),*] };
    }

    /// One architecture's syscall numbers, besides the ruled ones.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    struct Numbers {
        /// Every syscall of the `libc` crate's table (the kernel's
        /// headers) the filter lets through unchanged, on purpose. Removed
        /// syscalls libc still names (`_sysctl`, `nfsservctl`,
        /// `lookup_dcookie`, ...) answer `ENOSYS` from the kernel.
        allowed: &'static [(libc::c_long, &'static str)],
        /// Allowed syscalls `libc` has no constant for, by number and name
        /// from the kernel's table.
        allowed_by_number: &'static [(libc::c_long, &'static str)],
        /// Numbers of syscalls the kernel removed: `ENOSYS`.
        unimplemented: &'static [(libc::c_long, &'static str)],
        /// Numbers never assigned on this architecture: `ENOSYS`.
        unassigned: &'static [std::ops::RangeInclusive<libc::c_long>],
        /// Where this architecture's `asm/unistd_64.h` may be.
        headers: &'static [&'static str],
    }

    /// x86-64, from `arch/x86/entry/syscalls/syscall_64.tbl` of Linux 6.18.
    /// `uretprobe` and `uprobe` are called only by the kernel's uprobe
    /// trampolines (and seccomp lets them through unfiltered since Linux
    /// 6.13); 337-423 are kept free so the generic numbers line up.
    #[cfg(target_arch = "x86_64")]
    const NUMBERS: Numbers = Numbers {
        allowed: &named![
            SYS_read,
            SYS_write,
            SYS_close,
            SYS_stat,
            SYS_fstat,
            SYS_lstat,
            SYS_poll,
            SYS_lseek,
            SYS_mmap,
            SYS_mprotect,
            SYS_munmap,
            SYS_brk,
            SYS_rt_sigaction,
            SYS_rt_sigprocmask,
            SYS_rt_sigreturn,
            SYS_pread64,
            SYS_pwrite64,
            SYS_readv,
            SYS_writev,
            SYS_access,
            SYS_pipe,
            SYS_select,
            SYS_sched_yield,
            SYS_mremap,
            SYS_msync,
            SYS_mincore,
            SYS_madvise,
            SYS_shmget,
            SYS_shmat,
            SYS_shmctl,
            SYS_dup,
            SYS_dup2,
            SYS_pause,
            SYS_nanosleep,
            SYS_getitimer,
            SYS_alarm,
            SYS_setitimer,
            SYS_getpid,
            SYS_sendfile,
            SYS_connect,
            SYS_accept,
            SYS_recvfrom,
            SYS_recvmsg,
            SYS_shutdown,
            SYS_bind,
            SYS_listen,
            SYS_getsockname,
            SYS_getpeername,
            SYS_getsockopt,
            SYS_fork,
            SYS_vfork,
            SYS_execve,
            SYS_exit,
            SYS_wait4,
            SYS_kill,
            SYS_uname,
            SYS_semget,
            SYS_semop,
            SYS_semctl,
            SYS_shmdt,
            SYS_msgget,
            SYS_msgsnd,
            SYS_msgrcv,
            SYS_msgctl,
            SYS_fcntl,
            SYS_flock,
            SYS_fsync,
            SYS_fdatasync,
            SYS_truncate,
            SYS_ftruncate,
            SYS_getdents,
            SYS_getcwd,
            SYS_chdir,
            SYS_fchdir,
            SYS_rename,
            SYS_mkdir,
            SYS_rmdir,
            SYS_link,
            SYS_unlink,
            SYS_symlink,
            SYS_readlink,
            SYS_chown,
            SYS_fchown,
            SYS_lchown,
            SYS_umask,
            SYS_gettimeofday,
            SYS_getrlimit,
            SYS_getrusage,
            SYS_sysinfo,
            SYS_times,
            SYS_getuid,
            SYS_getgid,
            SYS_setuid,
            SYS_setgid,
            SYS_geteuid,
            SYS_getegid,
            SYS_setpgid,
            SYS_getppid,
            SYS_getpgrp,
            SYS_setsid,
            SYS_setreuid,
            SYS_setregid,
            SYS_getgroups,
            SYS_setgroups,
            SYS_setresuid,
            SYS_getresuid,
            SYS_setresgid,
            SYS_getresgid,
            SYS_getpgid,
            SYS_setfsuid,
            SYS_setfsgid,
            SYS_getsid,
            SYS_capget,
            SYS_capset,
            SYS_rt_sigpending,
            SYS_rt_sigtimedwait,
            SYS_rt_sigqueueinfo,
            SYS_rt_sigsuspend,
            SYS_sigaltstack,
            SYS_utime,
            SYS_ustat,
            SYS_statfs,
            SYS_fstatfs,
            SYS_sysfs,
            SYS_getpriority,
            SYS_setpriority,
            SYS_sched_setparam,
            SYS_sched_getparam,
            SYS_sched_setscheduler,
            SYS_sched_getscheduler,
            SYS_sched_get_priority_max,
            SYS_sched_get_priority_min,
            SYS_sched_rr_get_interval,
            SYS_mlock,
            SYS_munlock,
            SYS_mlockall,
            SYS_munlockall,
            SYS__sysctl,
            SYS_prctl,
            SYS_arch_prctl,
            SYS_setrlimit,
            SYS_sync,
            SYS_sethostname,
            SYS_setdomainname,
            SYS_nfsservctl,
            SYS_getpmsg,
            SYS_putpmsg,
            SYS_afs_syscall,
            SYS_tuxcall,
            SYS_security,
            SYS_gettid,
            SYS_readahead,
            SYS_setxattr,
            SYS_lsetxattr,
            SYS_fsetxattr,
            SYS_getxattr,
            SYS_lgetxattr,
            SYS_fgetxattr,
            SYS_listxattr,
            SYS_llistxattr,
            SYS_flistxattr,
            SYS_removexattr,
            SYS_lremovexattr,
            SYS_fremovexattr,
            SYS_tkill,
            SYS_time,
            SYS_futex,
            SYS_sched_setaffinity,
            SYS_sched_getaffinity,
            SYS_set_thread_area,
            SYS_io_setup,
            SYS_io_destroy,
            SYS_io_getevents,
            SYS_io_submit,
            SYS_io_cancel,
            SYS_get_thread_area,
            SYS_lookup_dcookie,
            SYS_epoll_create,
            SYS_epoll_ctl_old,
            SYS_epoll_wait_old,
            SYS_remap_file_pages,
            SYS_getdents64,
            SYS_set_tid_address,
            SYS_restart_syscall,
            SYS_semtimedop,
            SYS_fadvise64,
            SYS_timer_create,
            SYS_timer_settime,
            SYS_timer_gettime,
            SYS_timer_getoverrun,
            SYS_timer_delete,
            SYS_clock_gettime,
            SYS_clock_getres,
            SYS_clock_nanosleep,
            SYS_exit_group,
            SYS_epoll_wait,
            SYS_epoll_ctl,
            SYS_tgkill,
            SYS_utimes,
            SYS_vserver,
            SYS_mbind,
            SYS_set_mempolicy,
            SYS_get_mempolicy,
            SYS_mq_open,
            SYS_mq_unlink,
            SYS_mq_timedsend,
            SYS_mq_timedreceive,
            SYS_mq_notify,
            SYS_mq_getsetattr,
            SYS_waitid,
            SYS_ioprio_set,
            SYS_ioprio_get,
            SYS_inotify_init,
            SYS_inotify_add_watch,
            SYS_inotify_rm_watch,
            SYS_migrate_pages,
            SYS_mkdirat,
            SYS_fchownat,
            SYS_futimesat,
            SYS_newfstatat,
            SYS_unlinkat,
            SYS_renameat,
            SYS_linkat,
            SYS_symlinkat,
            SYS_readlinkat,
            SYS_faccessat,
            SYS_pselect6,
            SYS_ppoll,
            SYS_set_robust_list,
            SYS_get_robust_list,
            SYS_splice,
            SYS_tee,
            SYS_sync_file_range,
            SYS_vmsplice,
            SYS_move_pages,
            SYS_utimensat,
            SYS_epoll_pwait,
            SYS_signalfd,
            SYS_timerfd_create,
            SYS_eventfd,
            SYS_fallocate,
            SYS_timerfd_settime,
            SYS_timerfd_gettime,
            SYS_accept4,
            SYS_signalfd4,
            SYS_eventfd2,
            SYS_epoll_create1,
            SYS_dup3,
            SYS_pipe2,
            SYS_inotify_init1,
            SYS_preadv,
            SYS_pwritev,
            SYS_rt_tgsigqueueinfo,
            SYS_recvmmsg,
            SYS_fanotify_mark,
            SYS_prlimit64,
            SYS_syncfs,
            SYS_getcpu,
            SYS_kcmp,
            SYS_sched_setattr,
            SYS_sched_getattr,
            SYS_renameat2,
            SYS_seccomp,
            SYS_getrandom,
            SYS_memfd_create,
            SYS_execveat,
            SYS_membarrier,
            SYS_mlock2,
            SYS_copy_file_range,
            SYS_preadv2,
            SYS_pwritev2,
            SYS_pkey_mprotect,
            SYS_pkey_alloc,
            SYS_pkey_free,
            SYS_statx,
            SYS_rseq,
            SYS_pidfd_send_signal,
            SYS_pidfd_open,
            SYS_close_range,
            SYS_faccessat2,
            SYS_process_madvise,
            SYS_epoll_pwait2,
            SYS_landlock_create_ruleset,
            SYS_landlock_add_rule,
            SYS_landlock_restrict_self,
            SYS_memfd_secret,
            SYS_process_mrelease,
            SYS_futex_waitv,
            SYS_set_mempolicy_home_node,
            SYS_mseal,
        ],
        allowed_by_number: &[
            (333, "io_pgetevents"),
            (335, "uretprobe"),
            (336, "uprobe"),
            (451, "cachestat"),
            (453, "map_shadow_stack"),
            (454, "futex_wake"),
            (455, "futex_wait"),
            (456, "futex_requeue"),
            (459, "lsm_get_self_attr"),
            (460, "lsm_set_self_attr"),
            (461, "lsm_list_modules"),
            (463, "setxattrat"),
            (464, "getxattrat"),
            (465, "listxattrat"),
            (466, "removexattrat"),
            (468, "file_getattr"),
            (469, "file_setattr"),
        ],
        unimplemented: &[
            (174, "create_module"),
            (177, "get_kernel_syms"),
            (178, "query_module"),
        ],
        unassigned: &[337..=423],
        headers: &[
            "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
            "/usr/include/asm/unistd_64.h",
        ],
    };

    /// aarch64, from `arch/arm64/tools/syscall_64.tbl` of Linux 6.18 (the
    /// generic table with `renameat`, `rlimit` and `memfd_secret`): 244-259
    /// are the generic table's architecture-specific slots, unused on
    /// arm64, and 403-423 the 32-bit `time64` calls.
    #[cfg(target_arch = "aarch64")]
    const NUMBERS: Numbers = Numbers {
        allowed: &named![
            SYS_io_setup,
            SYS_io_destroy,
            SYS_io_submit,
            SYS_io_cancel,
            SYS_io_getevents,
            SYS_setxattr,
            SYS_lsetxattr,
            SYS_fsetxattr,
            SYS_getxattr,
            SYS_lgetxattr,
            SYS_fgetxattr,
            SYS_listxattr,
            SYS_llistxattr,
            SYS_flistxattr,
            SYS_removexattr,
            SYS_lremovexattr,
            SYS_fremovexattr,
            SYS_getcwd,
            SYS_lookup_dcookie,
            SYS_eventfd2,
            SYS_epoll_create1,
            SYS_epoll_ctl,
            SYS_epoll_pwait,
            SYS_dup,
            SYS_dup3,
            SYS_fcntl,
            SYS_inotify_init1,
            SYS_inotify_add_watch,
            SYS_inotify_rm_watch,
            SYS_ioprio_set,
            SYS_ioprio_get,
            SYS_flock,
            SYS_mkdirat,
            SYS_unlinkat,
            SYS_symlinkat,
            SYS_linkat,
            SYS_nfsservctl,
            SYS_statfs,
            SYS_fstatfs,
            SYS_truncate,
            SYS_ftruncate,
            SYS_fallocate,
            SYS_faccessat,
            SYS_chdir,
            SYS_fchdir,
            SYS_fchownat,
            SYS_fchown,
            SYS_close,
            SYS_pipe2,
            SYS_getdents64,
            SYS_lseek,
            SYS_read,
            SYS_write,
            SYS_readv,
            SYS_writev,
            SYS_pread64,
            SYS_pwrite64,
            SYS_preadv,
            SYS_pwritev,
            SYS_sendfile,
            SYS_pselect6,
            SYS_ppoll,
            SYS_signalfd4,
            SYS_vmsplice,
            SYS_splice,
            SYS_tee,
            SYS_readlinkat,
            SYS_newfstatat,
            SYS_fstat,
            SYS_sync,
            SYS_fsync,
            SYS_fdatasync,
            SYS_timerfd_create,
            SYS_timerfd_settime,
            SYS_timerfd_gettime,
            SYS_utimensat,
            SYS_capget,
            SYS_capset,
            SYS_exit,
            SYS_exit_group,
            SYS_waitid,
            SYS_set_tid_address,
            SYS_futex,
            SYS_set_robust_list,
            SYS_get_robust_list,
            SYS_nanosleep,
            SYS_getitimer,
            SYS_setitimer,
            SYS_timer_create,
            SYS_timer_gettime,
            SYS_timer_getoverrun,
            SYS_timer_settime,
            SYS_timer_delete,
            SYS_clock_gettime,
            SYS_clock_getres,
            SYS_clock_nanosleep,
            SYS_sched_setparam,
            SYS_sched_setscheduler,
            SYS_sched_getscheduler,
            SYS_sched_getparam,
            SYS_sched_setaffinity,
            SYS_sched_getaffinity,
            SYS_sched_yield,
            SYS_sched_get_priority_max,
            SYS_sched_get_priority_min,
            SYS_sched_rr_get_interval,
            SYS_restart_syscall,
            SYS_kill,
            SYS_tkill,
            SYS_tgkill,
            SYS_sigaltstack,
            SYS_rt_sigsuspend,
            SYS_rt_sigaction,
            SYS_rt_sigprocmask,
            SYS_rt_sigpending,
            SYS_rt_sigtimedwait,
            SYS_rt_sigqueueinfo,
            SYS_rt_sigreturn,
            SYS_setpriority,
            SYS_getpriority,
            SYS_setregid,
            SYS_setgid,
            SYS_setreuid,
            SYS_setuid,
            SYS_setresuid,
            SYS_getresuid,
            SYS_setresgid,
            SYS_getresgid,
            SYS_setfsuid,
            SYS_setfsgid,
            SYS_times,
            SYS_setpgid,
            SYS_getpgid,
            SYS_getsid,
            SYS_setsid,
            SYS_getgroups,
            SYS_setgroups,
            SYS_uname,
            SYS_sethostname,
            SYS_setdomainname,
            SYS_getrusage,
            SYS_umask,
            SYS_prctl,
            SYS_getcpu,
            SYS_gettimeofday,
            SYS_getpid,
            SYS_getppid,
            SYS_getuid,
            SYS_geteuid,
            SYS_getgid,
            SYS_getegid,
            SYS_gettid,
            SYS_sysinfo,
            SYS_mq_open,
            SYS_mq_unlink,
            SYS_mq_timedsend,
            SYS_mq_timedreceive,
            SYS_mq_notify,
            SYS_mq_getsetattr,
            SYS_msgget,
            SYS_msgctl,
            SYS_msgrcv,
            SYS_msgsnd,
            SYS_semget,
            SYS_semctl,
            SYS_semtimedop,
            SYS_semop,
            SYS_shmget,
            SYS_shmctl,
            SYS_shmat,
            SYS_shmdt,
            SYS_bind,
            SYS_listen,
            SYS_accept,
            SYS_connect,
            SYS_getsockname,
            SYS_getpeername,
            SYS_recvfrom,
            SYS_getsockopt,
            SYS_shutdown,
            SYS_recvmsg,
            SYS_readahead,
            SYS_brk,
            SYS_munmap,
            SYS_mremap,
            SYS_execve,
            SYS_mmap,
            SYS_fadvise64,
            SYS_mprotect,
            SYS_msync,
            SYS_mlock,
            SYS_munlock,
            SYS_mlockall,
            SYS_munlockall,
            SYS_mincore,
            SYS_madvise,
            SYS_remap_file_pages,
            SYS_mbind,
            SYS_get_mempolicy,
            SYS_set_mempolicy,
            SYS_migrate_pages,
            SYS_move_pages,
            SYS_rt_tgsigqueueinfo,
            SYS_accept4,
            SYS_recvmmsg,
            SYS_wait4,
            SYS_prlimit64,
            SYS_fanotify_mark,
            SYS_syncfs,
            SYS_kcmp,
            SYS_sched_setattr,
            SYS_sched_getattr,
            SYS_renameat2,
            SYS_seccomp,
            SYS_getrandom,
            SYS_memfd_create,
            SYS_execveat,
            SYS_membarrier,
            SYS_mlock2,
            SYS_copy_file_range,
            SYS_preadv2,
            SYS_pwritev2,
            SYS_pkey_mprotect,
            SYS_pkey_alloc,
            SYS_pkey_free,
            SYS_statx,
            SYS_rseq,
            SYS_pidfd_send_signal,
            SYS_pidfd_open,
            SYS_close_range,
            SYS_faccessat2,
            SYS_process_madvise,
            SYS_epoll_pwait2,
            SYS_landlock_create_ruleset,
            SYS_landlock_add_rule,
            SYS_landlock_restrict_self,
            SYS_memfd_secret,
            SYS_process_mrelease,
            SYS_futex_waitv,
            SYS_set_mempolicy_home_node,
            SYS_mseal,
        ],
        allowed_by_number: &[
            (38, "renameat"),
            (84, "sync_file_range"),
            (163, "getrlimit"),
            (164, "setrlimit"),
            (292, "io_pgetevents"),
            (451, "cachestat"),
            (453, "map_shadow_stack"),
            (454, "futex_wake"),
            (455, "futex_wait"),
            (456, "futex_requeue"),
            (459, "lsm_get_self_attr"),
            (460, "lsm_set_self_attr"),
            (461, "lsm_list_modules"),
            (463, "setxattrat"),
            (464, "getxattrat"),
            (465, "listxattrat"),
            (466, "removexattrat"),
            (468, "file_getattr"),
            (469, "file_setattr"),
        ],
        unimplemented: &[],
        unassigned: &[244..=259, 295..=423],
        headers: &["/usr/include/aarch64-linux-gnu/asm/unistd_64.h"],
    };

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn every_syscall_number_is_allowed_or_ruled_on_purpose() {
        let ruled: Vec<libc::c_long> = table(false)
            .unwrap()
            .iter()
            .map(|(n, _)| libc::c_long::from(*n))
            .collect();
        let allowed: Vec<(libc::c_long, &str)> = NUMBERS
            .allowed
            .iter()
            .chain(NUMBERS.allowed_by_number)
            .map(|(n, name)| (*n, name.trim_start_matches("SYS_")))
            .collect();
        let unassigned = |n: libc::c_long| NUMBERS.unassigned.iter().any(|r| r.contains(&n));
        let last = libc::c_long::from(LAST_NR);
        for n in 0..=last {
            let classes = [
                ruled.contains(&n),
                allowed.iter().any(|(a, _)| *a == n),
                NUMBERS.unimplemented.iter().any(|(u, _)| *u == n),
                unassigned(n),
            ];
            let hits = classes.iter().filter(|c| **c).count();
            assert_eq!(
                hits, 1,
                "syscall {n}: in {hits} classes (ruled, allowed, unimplemented, unassigned) \
                 instead of exactly one: classify it in seccomp.rs"
            );
        }
        // What the program answers for each class.
        let prog = build(false).unwrap().program;
        let arch = audit_arch().unwrap();
        for (n, name) in &allowed {
            let n = u32::try_from(*n).unwrap();
            for args in [[0; 6], [u64::MAX; 6]] {
                assert_eq!(run(&prog, n, arch, args), RET_ALLOW, "{name}");
            }
        }
        for n in (LAST_NR + 1..=1024).chain([X32_BIT - 1]) {
            assert_eq!(run(&prog, n, arch, [0; 6]), RET_ENOSYS, "number {n}");
        }
        // The kernel headers of this machine, when present, name the same
        // syscalls at the same numbers (they may be older than the table).
        let header = NUMBERS
            .headers
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok());
        let Some(header) = header else {
            eprintln!("no asm/unistd_64.h: the names were not cross-checked");
            return;
        };
        let mut checked = 0;
        for line in header.lines() {
            let mut w = line.split_whitespace();
            let (Some("#define"), Some(name), Some(num)) = (w.next(), w.next(), w.next()) else {
                continue;
            };
            let (Some(name), Ok(num)) = (name.strip_prefix("__NR_"), num.parse::<libc::c_long>())
            else {
                continue;
            };
            assert!(num <= last, "{name} ({num}) is newer than LAST_NR");
            assert!(!unassigned(num), "{name} ({num}) is assigned");
            let mine = allowed
                .iter()
                .chain(NUMBERS.unimplemented)
                .find(|(n, _)| *n == num);
            if let Some((_, mine)) = mine {
                assert_eq!(mine.trim_start_matches("SYS_"), name, "syscall {num}");
            }
            checked += 1;
        }
        assert!(checked > 250, "only {checked} syscalls in the header");
    }

    #[test]
    fn any_number_is_answered_within_a_few_comparisons() {
        // What the kernel's action cache pays per syscall number: the steps
        // until a number without a rule is answered.
        let prog = build(false).unwrap().program;
        let arch = audit_arch().unwrap();
        let ruled: Vec<u32> = table(false).unwrap().iter().map(|(n, _)| *n).collect();
        let worst = (0..=600u32)
            .filter(|n| !ruled.contains(n))
            .map(|n| steps(&prog, n, arch))
            .max()
            .unwrap();
        let chain = (0..=600u32)
            .filter(|n| !ruled.contains(n))
            .map(|n| steps(&reference().unwrap(), n, arch))
            .max()
            .unwrap();
        assert!(worst <= 16, "{worst} steps");
        assert!(chain > 3 * worst, "chain {chain} vs tree {worst}");
    }

    /// Instructions executed before the program returns, or before it first
    /// loads an argument (from there on the kernel's cache does not follow).
    fn steps(prog: &[sock_filter], nr: u32, arch: u32) -> usize {
        let mut a = 0u32;
        let mut pc = 0usize;
        for n in 1..=prog.len() {
            let i = &prog[pc];
            match i.code {
                0x20 if i.k == OFF_NR => a = nr,
                0x20 if i.k == OFF_ARCH => a = arch,
                0x15 | 0x35 => {
                    let t = if i.code == 0x15 { a == i.k } else { a >= i.k };
                    pc += usize::from(if t { i.jt } else { i.jf });
                }
                0x05 => pc += i.k as usize,
                _ => return n,
            }
            pc += 1;
        }
        panic!("no return")
    }
}
