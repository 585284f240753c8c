//! The seccomp deny list, compiled to cBPF with `seccompiler` in the
//! launcher and installed last in the worker.
//!
//! One program is installed (the kernel checks, converts and JITs each
//! filter separately, so one program costs a third of three). In order:
//! 1. the architecture check: another syscall ABI (i386 `int 0x80`, which
//!    also covers `socketcall`) kills the process;
//! 2. a hand-written guard that refuses every syscall number with the x32
//!    bit (`0x4000_0000`) set, which `seccompiler` does not check;
//! 3. `clone3` answers `ENOSYS`, so libc falls back to `clone`, whose flags
//!    the deny list can inspect;
//! 4. the deny list compiled by `seccompiler` (it repeats the architecture
//!    check), answering `EPERM`; every integer argument is compared on its
//!    low 32 bits (`Dword`), so high bits cannot smuggle a value past a
//!    comparison (CVE-2019-10063 style).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// The compiled filter: one program.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    pub(crate) program: BpfProgram,
}

/// The target and its `AUDIT_ARCH_*` value (`seccomp_data.arch`).
fn arch() -> Result<(TargetArch, u32), String> {
    // EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    const LE64: u32 = 0x8000_0000 | 0x4000_0000;
    if cfg!(target_arch = "x86_64") {
        Ok((TargetArch::x86_64, 62 | LE64))
    } else if cfg!(target_arch = "aarch64") {
        Ok((TargetArch::aarch64, 183 | LE64))
    } else if cfg!(target_arch = "riscv64") {
        Ok((TargetArch::riscv64, 243 | LE64))
    } else {
        Err(String::from("no seccomp filter for this architecture"))
    }
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The x32 syscall bit.
pub(crate) const X32_BIT: u32 = 0x4000_0000;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The hand-written head of the program: the architecture check, the x32
/// guard, and `clone3` → `ENOSYS`. Every path either returns or falls
/// through to the next instruction after the head (the compiled deny list).
fn head(audit_arch: u32) -> BpfProgram {
    let clone3 = u32::try_from(libc::SYS_clone3).unwrap_or(u32::MAX);
    vec![
        // A = seccomp_data.arch; another ABI is killed.
        insn(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        insn(BPF_JEQ_K, 1, 0, audit_arch),
        insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        // A = seccomp_data.nr; the x32 bit is refused.
        insn(BPF_LD_W_ABS, 0, 0, OFF_NR),
        insn(BPF_JGE_K, 0, 1, X32_BIT),
        insn(BPF_RET_K, 0, 0, RET_ERRNO | (libc::EPERM as u32)),
        // clone3 answers ENOSYS.
        insn(BPF_JEQ_K, 0, 1, clone3),
        insn(BPF_RET_K, 0, 0, RET_ERRNO | (libc::ENOSYS as u32)),
    ]
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

/// Syscalls denied outright with `EPERM`.
fn denied_outright() -> Vec<libc::c_long> {
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
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_fanotify_init,
        libc::SYS_quotactl,
        libc::SYS_vhangup,
        libc::SYS_syslog,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib]);
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

/// Build the filter.
pub(crate) fn build() -> Result<Filters, String> {
    let (arch, audit_arch) = arch()?;
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
        ],
    );
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
    let deny_prog: BpfProgram = deny_filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let mut program = head(audit_arch);
    program.extend(deny_prog);
    Ok(Filters { program })
}

/// Install the filter on the calling thread (`no_new_privs` must be set).
pub(crate) fn install(filters: &Filters) -> Result<(), i32> {
    seccompiler::apply_filter(&filters.program).map_err(|e| match e {
        seccompiler::Error::Seccomp(io) => io.raw_os_error().unwrap_or(libc::EINVAL),
        _ => libc::EINVAL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn one_program_answers_like_the_three_filters_did() {
        let f = build().unwrap();
        let (_, arch) = arch().unwrap();
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
}
