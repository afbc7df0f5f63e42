//! subPath volume mounts, resolved inside their volume and bound by
//! descriptor, as the upstream kubelet does (CVE-2017-1002101).
//!
//! A container of the pod can write the volume, so a path inside it is
//! untrusted: `ln -s / /vol/x` in one container would otherwise give the
//! next one that mounts subPath `x` the node's root. Each subPath is
//! opened component by component under the volume with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (a symlink that stays
//! inside is followed, one that leaves — absolute, or climbing — is an
//! error), missing directories are made with `mkdirat` on the descriptor
//! of their parent, and the result is bind-mounted through
//! `/proc/self/fd/N` onto a path the kubelet owns:
//!
//! ```text
//! <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>
//! ```
//!
//! which is what the runtime is given. Between the check and the mount
//! nothing is looked up by name again, so a swap of the path after the
//! check changes nothing. The binds are removed with the pod's directory
//! (`volumes::remove_pod_dir` unmounts everything under it).

use super::volumes::{pod_dir, VolumeError};
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::Container;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

fn setup_err(volume: &str, message: String) -> VolumeError {
    VolumeError::Setup {
        volume: volume.to_string(),
        message,
    }
}

/// Binds every subPath mount of `c`; returns volume-mount index → the
/// path to give the runtime.
pub fn bind_all(
    s: &Settings,
    uid: &str,
    c: &Container,
    volumes: &HashMap<String, PathBuf>,
) -> Result<HashMap<usize, PathBuf>, VolumeError> {
    let mut out = HashMap::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(sub) = m.sub_path.as_deref().filter(|p| !p.is_empty()) else {
            continue;
        };
        let Some(base) = volumes.get(&m.name) else {
            continue;
        };
        let target = pod_dir(s, uid)
            .join("volume-subpaths")
            .join(&m.name)
            .join(&c.name)
            .join(i.to_string());
        bind(base, sub, &target)
            .map_err(|e| setup_err(&m.name, format!("subPath {sub:?}: {e}")))?;
        out.insert(i, target);
    }
    Ok(out)
}

/// Opens `sub` under `base` (making missing directories) and binds it
/// onto `target`.
pub fn bind(base: &Path, sub: &str, target: &Path) -> Result<(), String> {
    let fd = open_beneath(base, sub)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?;
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    // A restarted container gets a fresh bind of what the path is now.
    if super::volumes::is_mountpoint(target) {
        rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)
            .map_err(|e| format!("unmount {}: {e}", target.display()))?;
    }
    let made = if is_dir {
        std::fs::create_dir(target)
    } else {
        std::fs::File::create(target).map(|_| ())
    };
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", target.display())),
    }
    rustix::mount::mount_bind(format!("/proc/self/fd/{}", fd.as_raw_fd()), target)
        .map_err(|e| format!("bind onto {}: {e}", target.display()))
}

fn beneath(dir: &OwnedFd, name: &Path) -> Result<OwnedFd, Errno> {
    crate::sys::openat2(
        dir,
        name,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// `sub` under `base`, component by component; `..`, an absolute path
/// and any symlink that leaves `base` are refused.
fn open_beneath(base: &Path, sub: &str) -> Result<OwnedFd, String> {
    let root = rustix::fs::open(
        base,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open the volume {}: {e}", base.display()))?;
    let mut so_far = PathBuf::new();
    let mut at = beneath(&root, Path::new(".")).map_err(|e| e.to_string())?;
    for c in Path::new(sub).components() {
        let name = match c {
            Component::Normal(n) => n,
            Component::CurDir => continue,
            _ => return Err("must be a relative path without '..'".into()),
        };
        so_far.push(name);
        at = match beneath(&root, &so_far) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                // Made on the descriptor of its parent, never by name.
                match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(format!("create {}: {e}", so_far.display())),
                }
                beneath(&root, &so_far).map_err(|e| explain(&so_far, e))?
            }
            Err(e) => return Err(explain(&so_far, e)),
        };
    }
    Ok(at)
}

fn explain(p: &Path, e: Errno) -> String {
    match e {
        Errno::XDEV => format!(
            "{} leaves the volume (a symlink out of it is not followed)",
            p.display()
        ),
        Errno::LOOP => format!("{}: a symlink loop or a magic link", p.display()),
        e => format!("{}: {e}", p.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_out_of_the_volume_are_refused() {
        let vol = tempfile::tempdir().expect("tmp");
        let v = vol.path();
        std::os::unix::fs::symlink("/", v.join("abs")).expect("symlink");
        std::os::unix::fs::symlink("../../../../..", v.join("up")).expect("symlink");
        std::fs::create_dir(v.join("d")).expect("dir");
        std::os::unix::fs::symlink("d", v.join("inside")).expect("symlink");
        for bad in ["abs", "abs/etc", "up", "up/etc/passwd", "../x", "/etc"] {
            let e = open_beneath(v, bad).expect_err(bad);
            assert!(
                e.contains("leaves the volume") || e.contains("without '..'"),
                "{bad}: {e}"
            );
        }
        // Nothing was made outside while refusing.
        assert!(!Path::new("/etc/passwd/x").exists());
        // A symlink that stays inside is followed; missing dirs are made.
        open_beneath(v, "inside").expect("inside");
        open_beneath(v, "inside/new/deeper").expect("made");
        assert!(v.join("d/new/deeper").is_dir());
    }
}
