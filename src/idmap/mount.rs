//! Idmapped mounts (`mount_setattr(MOUNT_ATTR_IDMAP)`): a tree seen
//! through a pod's user namespace, so that files owned by id N on disk
//! are owned by the pod's id N, with nothing on disk changed.
//!
//! - [`bind`]: a volume, idmapped, at a staging path the container's spec
//!   bind-mounts (a bind of an idmapped mount keeps its idmapping).
//! - [`overlay`]: an image's rootfs whose lower layers are idmapped
//!   (overlayfs takes idmapped layers since Linux 5.19); the upper layer
//!   is the container's own and created by its processes, so only its root
//!   directory is given to the pod's root. The idmapped layers are
//!   unmounted once the overlay holds them.
//! - [`probe`]: whether a filesystem can be idmapped here (tmpfs needs
//!   Linux 6.3).

use super::range::IdRange;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A tree that cannot be idmapped, with its filesystem named.
#[derive(Debug, thiserror::Error)]
#[error("cannot make an idmapped mount of {path} ({fstype}): {source}{hint}")]
pub struct IdmapError {
    pub path: PathBuf,
    pub fstype: String,
    pub source: io::Error,
    hint: &'static str,
}

impl IdmapError {
    fn new(path: &Path, source: io::Error) -> IdmapError {
        let fstype = fs_name(path);
        let hint = if source.raw_os_error() == Some(libc::EINVAL) {
            ": this kernel cannot idmap that filesystem (tmpfs needs Linux 6.3; network and FUSE filesystems cannot)"
        } else {
            ""
        };
        IdmapError {
            path: path.to_path_buf(),
            fstype,
            source,
            hint,
        }
    }
}

/// The name of the filesystem `path` is on, for messages.
pub fn fs_name(path: &Path) -> String {
    let Ok(st) = rustix::fs::statfs(path) else {
        return "unknown filesystem".into();
    };
    match st.f_type as u64 {
        0x0102_1994 => "tmpfs".into(),
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlay".into(),
        0x0102_1997 => "9p".into(),
        0x6573_5546 => "fuse".into(),
        0x6969 => "nfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        t => format!("filesystem type {t:#x}"),
    }
}

/// Opens a pinned user namespace.
pub fn open_userns(pin: &Path) -> io::Result<OwnedFd> {
    Ok(fs::File::open(pin)?.into())
}

/// Sets the idmapping of the detached tree `tree` to `userns`.
fn set_idmap(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>, recursive: bool) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: tree is an open mount fd, the path is "", attr is a valid
    // mount_attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A detached, idmapped clone of the tree at `src`.
fn idmapped_tree(
    src: &Path,
    userns: BorrowedFd<'_>,
    recursive: bool,
) -> Result<OwnedFd, IdmapError> {
    use rustix::mount::OpenTreeFlags as F;
    let mut flags = F::OPEN_TREE_CLONE | F::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= F::AT_RECURSIVE;
    }
    let tree = rustix::mount::open_tree(rustix::fs::CWD, src, flags)
        .map_err(|e| IdmapError::new(src, e.into()))?;
    set_idmap(tree.as_fd(), userns, recursive).map_err(|e| IdmapError::new(src, e))?;
    Ok(tree)
}

/// Mounts `src` at `dst` (which must exist, of the same kind: file or
/// directory) seen through `userns`.
pub fn bind(
    src: &Path,
    dst: &Path,
    userns: BorrowedFd<'_>,
    recursive: bool,
) -> Result<(), IdmapError> {
    let tree = idmapped_tree(src, userns, recursive)?;
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        rustix::fs::CWD,
        dst,
        rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| IdmapError::new(dst, e.into()))
}

/// An overlay at `target` of `lowers` (top first) idmapped through
/// `userns`, over `upper` and `work`. `staging` (created and removed here)
/// holds the idmapped layers until the overlay is mounted; `root` becomes
/// the owner of `upper`'s root directory (the pod's ids of the image's
/// root owner).
pub fn overlay(
    target: &Path,
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    userns: BorrowedFd<'_>,
    staging: &Path,
    root: (u32, u32),
) -> Result<(), IdmapError> {
    fs::create_dir_all(staging).map_err(|e| IdmapError::new(staging, e))?;
    let mut mounted: Vec<PathBuf> = Vec::new();
    let result = (|| {
        for (i, l) in lowers.iter().enumerate() {
            let at = staging.join(i.to_string());
            fs::create_dir_all(&at).map_err(|e| IdmapError::new(&at, e))?;
            bind(l, &at, userns, false)?;
            mounted.push(at);
        }
        rustix::fs::chown(
            upper,
            Some(rustix::fs::Uid::from_raw(root.0)),
            Some(rustix::fs::Gid::from_raw(root.1)),
        )
        .map_err(|e| IdmapError::new(upper, e.into()))?;
        let opts = crate::sys::overlay_options(&mounted, upper, work);
        crate::sys::mount_overlay(target, &opts).map_err(|e| IdmapError::new(target, e))
    })();
    for at in &mounted {
        let _ = rustix::mount::unmount(at, rustix::mount::UnmountFlags::DETACH);
        let _ = fs::remove_dir(at);
    }
    let _ = fs::remove_dir(staging);
    result
}

/// A user namespace made for a probe (mapping 65536 ids), held while the
/// returned holder lives, and opened.
fn throwaway_userns() -> io::Result<(super::ns::Holder, OwnedFd)> {
    let holder = super::ns::hold(0, None, false)?;
    let r = IdRange {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    };
    holder.map(r, r)?;
    let fd = open_userns(&holder.ns_path("user"))?;
    Ok((holder, fd))
}

/// Whether a tree at `path` can be idmapped here, tried on a detached
/// clone with a throw-away user namespace.
pub fn probe(path: &Path) -> Result<(), IdmapError> {
    let (_holder, userns) = throwaway_userns().map_err(|e| IdmapError::new(path, e))?;
    idmapped_tree(path, userns.as_fd(), false).map(drop)
}

/// Whether tmpfs (the kubelet's secret, configMap and projected volumes)
/// can be idmapped: a detached tmpfs is made and tried.
pub fn probe_tmpfs() -> Result<(), IdmapError> {
    use rustix::mount::{
        fsconfig_create, fsmount, fsopen, FsMountFlags, FsOpenFlags, MountAttrFlags,
    };
    let err = |source: io::Error, hint: &'static str| IdmapError {
        path: "tmpfs".into(),
        fstype: "tmpfs".into(),
        source,
        hint,
    };
    let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| err(e.into(), ""))?;
    fsconfig_create(fs.as_fd()).map_err(|e| err(e.into(), ""))?;
    let mnt = fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::empty(),
    )
    .map_err(|e| err(e.into(), ""))?;
    let (_holder, userns) = throwaway_userns().map_err(|e| err(e, ""))?;
    set_idmap(mnt.as_fd(), userns.as_fd(), false)
        .map_err(|e| err(e, ": tmpfs can be idmapped from Linux 6.3"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_idmapped_bind_shows_the_pods_owners() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        if probe(dir.path()).is_err() {
            eprintln!("skipped: {} cannot be idmapped here", fs_name(dir.path()));
            return;
        }
        let src = dir.path().join("src");
        fs::create_dir(&src).expect("src");
        fs::write(src.join("f"), "x").expect("file");
        let holder = super::super::ns::hold(0, None, false).expect("userns");
        let r = IdRange {
            container_id: 0,
            host_id: 300000,
            length: 65536,
        };
        holder.map(r, r).expect("map");
        let userns = open_userns(&holder.ns_path("user")).expect("open");
        let dst = dir.path().join("dst");
        fs::create_dir(&dst).expect("dst");
        bind(&src, &dst, userns.as_fd(), true).expect("bind");
        // Root's file, seen through the mapping: the pod's root, host 300000.
        assert_eq!(fs::metadata(dst.join("f")).expect("stat").uid(), 300000);
        assert_eq!(fs::metadata(src.join("f")).expect("stat").uid(), 0);
        rustix::mount::unmount(&dst, rustix::mount::UnmountFlags::DETACH).expect("umount");
    }
}
