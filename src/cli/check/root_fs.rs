//! The root's file system in `husk check`: whether an overlay with its
//! upper and work dirs under the root mounts and can be written.

use super::{check, Check, Level};
use std::path::{Path, PathBuf};

fn existing(p: &Path) -> PathBuf {
    let mut p = p.to_path_buf();
    while !p.exists() {
        if !p.pop() {
            return PathBuf::from("/");
        }
    }
    p
}

/// Tries an overlay mount in a scratch dir under the root (upper and work
/// dirs must be on the root's file system, with d_type).
pub(super) fn root_fs(root: &Path) -> Check {
    let base = existing(root);
    let scratch = match tempfile::Builder::new()
        .prefix(".husk-check-")
        .tempdir_in(&base)
    {
        Ok(d) => d,
        Err(e) => {
            return check(
                "root filesystem",
                Level::Fail,
                format!("cannot write under {}: {e}", base.display()),
                format!("make {} writable by root", root.display()),
            )
        }
    };
    let d = scratch.path();
    let dirs = ["lower", "upper", "work", "merged"].map(|n| d.join(n));
    for x in &dirs {
        if let Err(e) = std::fs::create_dir(x) {
            return check(
                "root filesystem",
                Level::Fail,
                format!("{}: {e}", x.display()),
                "",
            );
        }
    }
    let _ = std::fs::write(dirs[0].join("probe"), b"x");
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    );
    let mounted = rustix::mount::mount(
        "overlay",
        &dirs[3],
        "overlay",
        rustix::mount::MountFlags::empty(),
        Some(std::ffi::CString::new(opts).unwrap_or_default().as_c_str()),
    );
    let result = match mounted {
        Ok(()) => {
            let wrote = std::fs::write(dirs[3].join("probe"), b"y").is_ok();
            let _ = rustix::mount::unmount(&dirs[3], rustix::mount::UnmountFlags::DETACH);
            if wrote {
                check(
                    "root filesystem",
                    Level::Ok,
                    format!("{}: overlay upper and work dirs work there", base.display()),
                    "",
                )
            } else {
                check(
                    "root filesystem",
                    Level::Fail,
                    format!("{}: an overlay on it mounts but cannot be written", base.display()),
                    "put the root on ext4 or xfs (ftype=1)",
                )
            }
        }
        Err(e) => check(
            "root filesystem",
            Level::Fail,
            format!("{}: an overlay with its upper dir there fails: {e}", base.display()),
            "put the root on ext4 or xfs with ftype=1 (d_type), not on overlay, tmpfs without xattrs or NFS",
        ),
    };
    drop(scratch);
    result
}
