//! The binary the shims, and so every container's init and exec'd
//! process until its execve, run from: a copy of husk that cannot be
//! written (CVE-2019-5736).
//!
//! A container's init is a clone of its shim, so before its execve its
//! `/proc/<pid>/exe` is the shim's binary; a container that gets a
//! descriptor of it (an image whose entrypoint is `#!/proc/self/exe`,
//! a process of the pod that opens `/proc/<pid>/exe`) could otherwise
//! write the node's `/usr/bin/husk` once nothing runs it. The server
//! therefore starts every shim from a sealed handle, made once when it
//! starts, as runc does for its init:
//!
//! 1. **A read-only overlay** of the binary's directory (two lower
//!    layers, no upper: overlayfs's lower-only mode, where every write is
//!    refused), made with fsopen/fsmount and never attached anywhere. It
//!    costs no copy. The file is opened `O_PATH` from the detached mount.
//! 2. Where overlayfs refuses the binary's file system (a 9p or virtiofs
//!    share, say): **a sealed memfd copy** (`F_SEAL_WRITE`, `_GROW`,
//!    `_SHRINK`, `_SEAL`), one per server process, shared by every shim
//!    it starts.
//!
//! The shims are executed through `/proc/self/fd/N` (the handle is
//! close-on-exec; execve resolves it before closing), with argv[0] the
//! binary's own path, so the shims' command lines stay as they were.

use rustix::fs::{Mode, OFlags};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// How the sealed handle was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Overlay,
    Memfd,
}

/// A sealed handle of the husk binary, for the life of the server.
#[derive(Debug)]
pub struct Sealed {
    fd: OwnedFd,
    kind: Kind,
    original: PathBuf,
}

impl Sealed {
    /// Seals `exe`; `scratch` is a private dir where an empty lower layer
    /// may be made.
    pub fn new(exe: &Path, scratch: &Path) -> Result<Sealed, String> {
        let fd = match overlay(exe, scratch) {
            Ok(fd) => (fd, Kind::Overlay),
            Err(why) => {
                tracing::info!(reason = %why, "no read-only overlay of the husk binary: using a sealed copy");
                (memfd(exe)?, Kind::Memfd)
            }
        };
        Ok(Sealed {
            fd: fd.0,
            kind: fd.1,
            original: exe.to_path_buf(),
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The path to execute in this process (or a child of it before its
    /// execve).
    pub fn program(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// The binary's own path: argv[0] of what is started from it.
    pub fn original(&self) -> &Path {
        &self.original
    }
}

fn overlay(exe: &Path, scratch: &Path) -> Result<OwnedFd, String> {
    use rustix::mount::{
        fsconfig_create, fsconfig_set_string, fsmount, fsopen, FsMountFlags, FsOpenFlags,
        MountAttrFlags,
    };
    let real = std::fs::canonicalize(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let (Some(dir), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(format!("{}: no directory", real.display()));
    };
    let empty = scratch.join("lower");
    crate::store::modes::make_private(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    let esc = |p: &Path| {
        p.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace(':', "\\:")
    };
    let ctx = fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| format!("fsopen: {e}"))?;
    // The binary's dir on top, so that nothing in the empty one masks it.
    let lower = format!("{}:{}", esc(dir), esc(&empty));
    fsconfig_set_string(&ctx, "lowerdir", &lower).map_err(|e| format!("lowerdir={lower}: {e}"))?;
    let _ = fsconfig_set_string(&ctx, "xino", "off");
    fsconfig_create(&ctx).map_err(|e| format!("create the overlay: {e}"))?;
    let mnt = fsmount(
        &ctx,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_RDONLY
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOSUID,
    )
    .map_err(|e| format!("fsmount: {e}"))?;
    rustix::fs::openat(
        &mnt,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {} in the overlay: {e}", name.to_string_lossy()))
}

fn memfd(exe: &Path) -> Result<OwnedFd, String> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create("husk", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| format!("memfd_create: {e}"))?;
    let mut src = std::fs::File::open(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let mut dst = std::fs::File::from(fd);
    std::io::copy(&mut src, &mut dst).map_err(|e| format!("copy the husk binary: {e}"))?;
    let fd = OwnedFd::from(dst);
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )
    .map_err(|e| format!("seal the copy: {e}"))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o555)).map_err(|e| format!("fchmod: {e}"))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opening for writing, then writing: the first that fails.
    fn write_fails(s: &Sealed) -> std::io::Error {
        use std::io::Write;
        match std::fs::OpenOptions::new().write(true).open(s.program()) {
            Err(e) => e,
            Ok(mut f) => f.write_all(b"x").expect_err("a write to a sealed binary"),
        }
    }

    #[test]
    fn both_kinds_refuse_writes_and_run() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let t = tempfile::tempdir().expect("tmp");
        let bin = t.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        std::fs::copy("/bin/true", bin.join("true")).expect("copy");
        let s = Sealed::new(&bin.join("true"), t.path()).expect("sealed");
        assert_eq!(
            s.kind(),
            Kind::Overlay,
            "this host's file system takes an overlay"
        );
        assert_eq!(write_fails(&s).raw_os_error(), Some(libc::EROFS));
        let st = std::process::Command::new(s.program())
            .status()
            .expect("run");
        assert!(st.success());

        let m = Sealed {
            fd: memfd(&bin.join("true")).expect("memfd"),
            kind: Kind::Memfd,
            original: bin.join("true"),
        };
        assert_eq!(write_fails(&m).raw_os_error(), Some(libc::EPERM));
        assert!(std::process::Command::new(m.program())
            .status()
            .expect("run")
            .success());
        // The original is untouched and still writable by its owner.
        std::fs::OpenOptions::new()
            .append(true)
            .open(bin.join("true"))
            .expect("the original stays a plain file");
    }
}
