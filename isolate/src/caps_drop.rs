//! Dropping every capability set, locking securebits and switching to the
//! worker's uid/gid.

use caps::CapSet;

use crate::error::Step;
use crate::spawn::Fail;
use crate::sys;

/// `SECBIT_NOROOT | _LOCKED | SECBIT_NO_SETUID_FIXUP | _LOCKED |
/// SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | _LOCKED`.
pub(crate) const SECUREBITS_LOCKED: libc::c_ulong = 0xEF;

fn caps_err(what: &'static str) -> impl FnOnce(caps::errors::CapsError) -> Fail {
    move |e| Fail::new(Step::Capabilities, libc::EPERM, format!("{what}: {e}"))
}

/// Drop the bounding and ambient sets, lock securebits, become the worker
/// uid/gid, then clear the inheritable, permitted and effective sets and
/// check that all five are empty.
pub(crate) fn drop_all(uid: u32, gid: u32, may_setgroups: bool) -> Result<(), Fail> {
    caps::clear(None, CapSet::Ambient).map_err(caps_err("clear ambient"))?;
    caps::clear(None, CapSet::Bounding).map_err(caps_err("clear bounding"))?;
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
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("clear inheritable"))?;
    caps::clear(None, CapSet::Effective).map_err(caps_err("clear effective"))?;
    caps::clear(None, CapSet::Permitted).map_err(caps_err("clear permitted"))?;
    for set in [
        CapSet::Ambient,
        CapSet::Bounding,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        let left = caps::read(None, set).map_err(caps_err("read back"))?;
        if !left.is_empty() {
            return Err(Fail::new(
                Step::Capabilities,
                libc::EPERM,
                format!("{set:?} set not empty after drop"),
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
