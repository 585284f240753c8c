//! Dropping every capability set, locking securebits and switching to the
//! worker's uid/gid.

use crate::error::Step;
use crate::spawn::Fail;
use crate::sys;

/// `SECBIT_NOROOT | _LOCKED | SECBIT_NO_SETUID_FIXUP | _LOCKED |
/// SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | _LOCKED`.
pub(crate) const SECUREBITS_LOCKED: libc::c_ulong = 0xEF;

/// Capabilities are numbered below 64 (two 32-bit words in `capget`).
const CAP_WORD_BITS: u32 = 64;

fn cap_err(what: &'static str) -> impl FnOnce(i32) -> Fail {
    move |e| Fail::new(Step::Capabilities, e, what)
}

/// Drop the bounding and ambient sets, lock securebits, become the worker
/// uid/gid, then clear the inheritable, permitted and effective sets and
/// check that all five are empty.
///
/// Direct calls, one per capability only where the kernel has no bulk
/// form: `PR_CAP_AMBIENT_CLEAR_ALL`, one `PR_CAPBSET_DROP` per capability
/// up to the kernel's last (the first `EINVAL` ends the loop), one `capset`
/// for the other three sets; then one `capget` and one read per capability
/// of the bounding and ambient sets.
pub(crate) fn drop_all(uid: u32, gid: u32, may_setgroups: bool) -> Result<(), Fail> {
    sys::clear_ambient().map_err(cap_err("clear ambient"))?;
    let mut last = None;
    for cap in 0..CAP_WORD_BITS {
        match sys::bounding_drop(cap) {
            Ok(()) => last = Some(cap),
            Err(libc::EINVAL) if last.is_some() => break,
            Err(e) => return Err(Fail::new(Step::Capabilities, e, "drop bounding")),
        }
    }
    let last = last.ok_or_else(|| Fail::new(Step::Capabilities, libc::EINVAL, "drop bounding"))?;
    sys::set_securebits(SECUREBITS_LOCKED)
        .map_err(|e| Fail::new(Step::Capabilities, e, "lock securebits"))?;
    let g = nix::unistd::Gid::from_raw(gid);
    let u = nix::unistd::Uid::from_raw(uid);
    if may_setgroups {
        nix::unistd::setgroups(&[g])
            .map_err(|e| Fail::new(Step::Identity, e as i32, "setgroups"))?;
    }
    nix::unistd::setresgid(g, g, g)
        .map_err(|e| Fail::new(Step::Identity, e as i32, format!("setresgid {gid}")))?;
    nix::unistd::setresuid(u, u, u)
        .map_err(|e| Fail::new(Step::Identity, e as i32, format!("setresuid {uid}")))?;
    sys::capset_empty().map_err(cap_err("clear effective, permitted, inheritable"))?;
    // Read everything back.
    let [eff, prm, inh] = sys::capget().map_err(cap_err("read back"))?;
    for (name, set) in [("Effective", eff), ("Permitted", prm), ("Inheritable", inh)] {
        if set != 0 {
            return Err(Fail::new(
                Step::Capabilities,
                libc::EPERM,
                format!("{name} set not empty after drop"),
            ));
        }
    }
    for cap in 0..=last {
        if sys::bounding_has(cap).map_err(cap_err("read back bounding"))? {
            return Err(Fail::new(
                Step::Capabilities,
                libc::EPERM,
                "Bounding set not empty after drop",
            ));
        }
        if sys::ambient_is_set(cap).map_err(cap_err("read back ambient"))? {
            return Err(Fail::new(
                Step::Capabilities,
                libc::EPERM,
                "Ambient set not empty after drop",
            ));
        }
    }
    let bits =
        sys::get_securebits().map_err(|e| Fail::new(Step::Capabilities, e, "read securebits"))?;
    if libc::c_ulong::try_from(bits).unwrap_or(0) & SECUREBITS_LOCKED != SECUREBITS_LOCKED {
        return Err(Fail::new(
            Step::Capabilities,
            libc::EPERM,
            "securebits not locked",
        ));
    }
    Ok(())
}
