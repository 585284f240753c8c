//! The seccomp deny list, compiled to cBPF with `seccompiler` in the
//! launcher and installed last in the worker.
//!
//! Three filters are stacked (the kernel applies the strictest result):
//! 1. a hand-written guard that refuses every syscall number with the x32
//!    bit (`0x4000_0000`) set, which `seccompiler` does not check;
//! 2. `clone3` answers `ENOSYS`, so libc falls back to `clone`, whose flags
//!    the third filter can inspect;
//! 3. the deny list, answering `EPERM`; every integer argument is compared
//!    on its low 32 bits (`Dword`), so high bits cannot smuggle a value past
//!    a comparison (CVE-2019-10063 style).
//!
//! `seccompiler`'s own architecture check kills a process that uses another
//! syscall ABI (i386 `int 0x80`, which also covers `socketcall`).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// The compiled filters, in installation order.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    pub(crate) programs: Vec<BpfProgram>,
}

fn arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(String::from("no seccomp filter for this architecture"))
    }
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// The x32 syscall bit.
pub(crate) const X32_BIT: u32 = 0x4000_0000;

fn x32_guard() -> BpfProgram {
    vec![
        // A = seccomp_data.nr
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // if (A >= X32_BIT) goto deny else goto allow
        sock_filter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_ERRNO | (libc::EPERM as u32),
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
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

/// Build the three filters.
pub(crate) fn build() -> Result<Filters, String> {
    let arch = arch()?;
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
    let mut nosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    nosys.insert(libc::SYS_clone3, Vec::new());
    let nosys_filter = SeccompFilter::new(
        nosys,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let deny_prog: BpfProgram = deny_filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let nosys_prog: BpfProgram = nosys_filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(Filters {
        programs: vec![x32_guard(), nosys_prog, deny_prog],
    })
}

/// Install the filters on the calling thread (`no_new_privs` must be set).
pub(crate) fn install(filters: &Filters) -> Result<(), i32> {
    for p in &filters.programs {
        seccompiler::apply_filter(p).map_err(|e| match e {
            seccompiler::Error::Seccomp(io) => io.raw_os_error().unwrap_or(libc::EINVAL),
            _ => libc::EINVAL,
        })?;
    }
    Ok(())
}
