//! Applying a [`MountPlan`] inside the new mount namespace (run by the
//! sandbox's init before `pivot_root`).
//!
//! The sequence follows bubblewrap: a staging tmpfs becomes the root with
//! the host's old root under `/oldroot`; the new root is assembled at
//! `/newroot` from `/oldroot` sources; then `pivot_root(".", ".")` and a
//! lazy unmount drop every host mount that was not bound in.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use crate::plan::{MountOp, MountPlan};
use crate::sys;

/// A failed mount step: errno plus what it was doing.
pub(crate) type MountResult = Result<(), (i32, String)>;

const STAGE: &str = "/tmp";
const NEW: &str = "/newroot";
const OLD: &str = "/oldroot";
const EMPTY: &str = "/empty";

fn e(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> (i32, String) {
    let what = what.into();
    move |err| (err as i32, what)
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> (i32, String) {
    let what = what.into();
    move |err| (err.raw_os_error().unwrap_or(libc::EIO), what)
}

fn inside(path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    Path::new(NEW).join(rel)
}

fn host(path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    Path::new(OLD).join(rel)
}

fn cstr(p: &Path) -> Result<CString, (i32, String)> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| (libc::EINVAL, format!("NUL in `{}`", p.display())))
}

/// Create a mount point for `target` matching the kind of `source`, unless
/// something is there already. One syscall in the common case (the parent
/// exists): the parents are only created when that fails with `ENOENT`.
fn ensure_mountpoint(target: &Path, dir: bool) -> MountResult {
    let make = || -> std::io::Result<()> {
        if dir {
            std::fs::create_dir(target)
        } else {
            // O_CREAT|O_EXCL: any existing entry (file, directory, symlink,
            // not followed) is an EEXIST, as `symlink_metadata` succeeding
            // was before.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(target)
                .map(|_| ())
        }
    };
    let what = || {
        if dir {
            format!("mkdir {}", target.display())
        } else {
            format!("create mount point {}", target.display())
        }
    };
    match make() {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("mkdir {}", parent.display())))?;
            }
            match make() {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(io(what())(e)),
                _ => Ok(()),
            }
        }
        Err(e) => Err(io(what())(e)),
    }
}

/// A protected path or pinned ancestor must not have become a symlink
/// since the plan was made (the bind would follow it).
fn refuse_symlink(t: &Path) -> MountResult {
    match std::fs::symlink_metadata(t) {
        Ok(m) if m.file_type().is_symlink() => {
            Err((libc::ELOOP, format!("{} became a symlink", t.display())))
        }
        Ok(_) => Ok(()),
        Err(err) => Err((
            err.raw_os_error().unwrap_or(libc::EIO),
            format!("stat {}", t.display()),
        )),
    }
}

const RO_ATTRS: u64 = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;

fn bind(source: &Path, target: &Path, read_only: bool) -> MountResult {
    let dir = std::fs::metadata(source)
        .map(|m| m.is_dir())
        .map_err(io(format!("stat {}", source.display())))?;
    ensure_mountpoint(target, dir)?;
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(e(format!(
        "bind {} -> {}",
        source.display(),
        target.display()
    )))?;
    let attrs = if read_only {
        RO_ATTRS
    } else {
        libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV
    };
    let c = cstr(target)?;
    sys::mount_setattr_recursive(&c, attrs, 0)
        .map_err(|err| (err, format!("mount_setattr {}", target.display())))
}

/// The prefix of a failed overlay mount's detail: the launcher reports it
/// as the [`crate::Layer::StagedWrites`] layer unavailable, never as a
/// generic mount-plan error (and never falls back to a bind).
pub(crate) const STAGED_PREFIX: &str = "staged_writes: ";

/// The overlay options of a staged root, besides the layers. Chosen so the
/// upper layer stays plain for the change-set scanner: a whiteout is a 0/0
/// character device, an opaque directory carries `user.overlay.opaque`,
/// and nothing else is special.
/// - `userxattr`: the mount is made inside the sandbox's user namespace,
///   where only `user.overlay.*` xattrs can be written.
/// - `redirect_dir=nofollow`: no redirect xattrs are created (renaming a
///   directory of the lower layer fails with `EXDEV`, and `mv` copies),
///   and none left in an upper is followed.
/// - `metacopy=off`: a copy-up copies the data too, so every file in the
///   upper is complete (no metadata-only files pointing at the lower).
/// - `index=off`, `nfs_export=off`: no index directory, no origin
///   tracking the scanner would have to understand.
/// - `xino=off`: inode numbers are the layers' own.
const OVERLAY_OPTIONS: &[(&str, &str)] = &[
    ("redirect_dir", "nofollow"),
    ("metacopy", "off"),
    ("index", "off"),
    ("nfs_export", "off"),
    ("xino", "off"),
];

/// Mount a staged root: an overlayfs over the host directory `root` (its
/// `/oldroot` view; read-only to the overlay) with the stage's `upper` and
/// `work` (host paths too), at `root` in the new root, nosuid and nodev. Through the new mount API (`lowerdir+`,
/// Linux 6.8), so the paths need no escaping; a kernel without it is an
/// error naming the layer, as is any other failure.
fn overlay(root: &Path, upper: &Path, work: &Path) -> MountResult {
    let target = inside(root);
    let fail = |what: String| move |errno: i32| (errno, format!("{STAGED_PREFIX}{what}"));
    let fs = sys::fsopen(c"overlay").map_err(fail(String::from(
        "fsopen(\"overlay\") (the new mount API and overlayfs are needed)",
    )))?;
    let with_log = |what: String| {
        let fs = &fs;
        move |errno: i32| {
            let log = sys::fs_context_log(fs);
            let log = if log.is_empty() {
                String::new()
            } else {
                format!(" [{log}]")
            };
            (errno, format!("{STAGED_PREFIX}{what}{log}"))
        }
    };
    // Messages name the host paths, not their /oldroot view.
    for (key, shown) in [("lowerdir+", root), ("upperdir", upper), ("workdir", work)] {
        let k = CString::new(key).map_err(|_| (libc::EINVAL, String::from("option")))?;
        let v = cstr(&host(shown))?;
        sys::fsconfig_string(&fs, &k, &v).map_err(with_log(format!(
            "overlay {key}={}{}",
            shown.display(),
            if key == "lowerdir+" {
                " (lowerdir+ needs Linux 6.8)"
            } else {
                ""
            }
        )))?;
    }
    sys::fsconfig_flag(&fs, c"userxattr").map_err(with_log(String::from("overlay userxattr")))?;
    for (key, value) in OVERLAY_OPTIONS {
        let k = CString::new(*key).map_err(|_| (libc::EINVAL, String::from("option")))?;
        let v = CString::new(*value).map_err(|_| (libc::EINVAL, String::from("option")))?;
        sys::fsconfig_string(&fs, &k, &v).map_err(with_log(format!("overlay {key}={value}")))?;
    }
    sys::fsconfig_create(&fs).map_err(with_log(format!(
        "create the overlay of {}",
        root.display()
    )))?;
    let mnt = sys::fsmount(&fs, libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV).map_err(
        with_log(format!("fsmount the overlay of {}", root.display())),
    )?;
    ensure_mountpoint(&target, true)?;
    let t = cstr(&target)?;
    sys::move_mount_to(&mnt, &t).map_err(fail(format!(
        "move the overlay of {} into place",
        root.display()
    )))
}

fn remount_ro(target: &Path, extra: MsFlags) -> MountResult {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | extra,
        None::<&str>,
    )
    .map_err(e(format!("remount read-only {}", target.display())))
}

fn tmpfs(target: &Path, opts: &str, flags: MsFlags) -> MountResult {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts),
    )
    .map_err(e(format!("tmpfs {}", target.display())))
}

fn mount_dev() -> MountResult {
    let dev = inside(Path::new("/dev"));
    ensure_mountpoint(&dev, true)?;
    tmpfs(&dev, "mode=0755,size=64k", MsFlags::MS_NOEXEC)?;
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let src = host(&Path::new("/dev").join(name));
        if std::fs::symlink_metadata(&src).is_err() {
            continue;
        }
        let dst = dev.join(name);
        ensure_mountpoint(&dst, false)?;
        mount(
            Some(&src),
            &dst,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(e(format!("bind /dev/{name}")))?;
    }
    let pts = dev.join("pts");
    ensure_mountpoint(&pts, true)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(e("devpts /dev/pts"))?;
    let shm = dev.join("shm");
    ensure_mountpoint(&shm, true)?;
    tmpfs(&shm, "mode=1777,size=64m", MsFlags::MS_NOEXEC)?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))
            .map_err(io(format!("symlink /dev/{link}")))?;
    }
    remount_ro(&dev, MsFlags::MS_NOEXEC)
}

fn mount_proc() -> MountResult {
    let proc = inside(Path::new("/proc"));
    ensure_mountpoint(&proc, true)?;
    mount(
        Some("proc"),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(e("mount /proc"))?;
    for sub in ["sys", "sysrq-trigger", "irq", "bus", "fs"] {
        let p = proc.join(sub);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        mount(
            Some(&p),
            &p,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(e(format!("bind /proc/{sub}")))?;
        remount_ro(&p, MsFlags::MS_NOEXEC)?;
    }
    // The kernel's key lists are not per namespace: /proc/keys shows every
    // key the reader's uid owns (the launcher's, when the worker has its
    // uid), whatever keyring holds it, and /proc/key-users every uid's key
    // counts. Both are covered by the empty file.
    for sub in ["keys", "key-users"] {
        let p = proc.join(sub);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        mount(
            Some(EMPTY),
            &p,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(e(format!("mask /proc/{sub}")))?;
        remount_ro(&p, MsFlags::MS_NOEXEC)?;
    }
    Ok(())
}

fn mount_tmp(size: u64, uid: u32, gid: u32) -> MountResult {
    let tmp = inside(Path::new("/tmp"));
    ensure_mountpoint(&tmp, true)?;
    tmpfs(&tmp, &format!("mode=1777,size={size}"), MsFlags::empty())?;
    let home = tmp.join("home");
    std::fs::create_dir(&home).map_err(io("mkdir /tmp/home"))?;
    nix::unistd::chown(
        &home,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(e("chown /tmp/home"))?;
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(io("chmod /tmp/home"))
}

/// Build the new root and switch to it. Runs in the sandbox's init, inside
/// the new user, mount and PID namespaces, before anything else is shared.
/// The launcher's host-side work (placeholders, socket walk) has passed
/// before this runs: init calls it only on the launcher's go.
pub(crate) fn apply(plan: &MountPlan, uid: u32, gid: u32) -> MountResult {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(e("make / private"))?;
    let stage = Path::new(STAGE);
    tmpfs(stage, "mode=0755,size=64k", MsFlags::empty())?;
    std::fs::create_dir(Path::new(STAGE).join("newroot")).map_err(io("mkdir newroot"))?;
    std::fs::create_dir(Path::new(STAGE).join("oldroot")).map_err(io("mkdir oldroot"))?;
    nix::unistd::pivot_root(STAGE, &Path::new(STAGE).join("oldroot"))
        .map_err(e("pivot_root to staging"))?;
    nix::unistd::chdir("/").map_err(e("chdir /"))?;
    // The empty, read-only file every masked file is bound to.
    std::fs::write(EMPTY, b"").map_err(io("create the mask file"))?;
    std::fs::set_permissions(EMPTY, std::os::unix::fs::PermissionsExt::from_mode(0o444))
        .map_err(io("chmod the mask file"))?;

    let new = Path::new(NEW);
    let mut masks: Vec<PathBuf> = Vec::new();
    let mut root_tmpfs = false;
    for op in &plan.ops {
        match op {
            MountOp::RootTmpfs => {
                tmpfs(new, "mode=0755,size=1m", MsFlags::empty())?;
                root_tmpfs = true;
            }
            MountOp::RootHostReadOnly => {
                mount(
                    Some(OLD),
                    new,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(e("bind host root"))?;
                let c = cstr(new)?;
                sys::mount_setattr_recursive(&c, RO_ATTRS, 0)
                    .map_err(|err| (err, String::from("read-only host root")))?;
            }
            MountOp::Symlink { path, target } => {
                let link = inside(path);
                if let Some(parent) = link.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(io(format!("mkdir {}", parent.display())))?;
                }
                std::os::unix::fs::symlink(target, &link)
                    .map_err(io(format!("symlink {}", path.display())))?;
            }
            MountOp::BindReadOnly { source, path } => bind(&host(source), &inside(path), true)?,
            MountOp::BindWritable { path } => bind(&host(path), &inside(path), false)?,
            MountOp::Overlay { path, upper, work } => overlay(path, upper, work)?,
            MountOp::MaskDir { path } => {
                let t = inside(path);
                ensure_mountpoint(&t, true)?;
                tmpfs(&t, "mode=0755,size=64k", MsFlags::MS_NOEXEC)?;
                masks.push(t);
            }
            MountOp::MaskFile { path } => {
                let t = inside(path);
                ensure_mountpoint(&t, false)?;
                mount(
                    Some(EMPTY),
                    &t,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(e(format!("mask {}", path.display())))?;
                remount_ro(&t, MsFlags::MS_NOEXEC)?;
            }
            MountOp::Tmp { size } => mount_tmp(*size, uid, gid)?,
            MountOp::Dev => mount_dev()?,
            MountOp::Proc => mount_proc()?,
            MountOp::Pin { path } => {
                let t = inside(path);
                refuse_symlink(&t)?;
                mount(Some(&t), &t, None::<&str>, MsFlags::MS_BIND, None::<&str>)
                    .map_err(e(format!("pin {}", path.display())))?;
            }
            MountOp::Protect { path } => {
                let t = inside(path);
                refuse_symlink(&t)?;
                mount(
                    Some(&t),
                    &t,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(e(format!("protect {}", path.display())))?;
                let c = cstr(&t)?;
                sys::mount_setattr_recursive(&c, RO_ATTRS, 0)
                    .map_err(|err| (err, format!("read-only {}", path.display())))?;
            }
        }
    }
    for m in &masks {
        remount_ro(m, MsFlags::MS_NOEXEC)?;
    }
    if root_tmpfs {
        remount_ro(new, MsFlags::empty())?;
    }
    nix::unistd::chdir(new).map_err(e("chdir newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(e("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(e("detach old root"))?;
    nix::unistd::chdir("/").map_err(e("chdir /"))?;
    Ok(())
}
