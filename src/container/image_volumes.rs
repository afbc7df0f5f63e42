//! Image volumes (KEP-4639): a CRI `Mount` whose `image` is set is an
//! image the kubelet has pulled, mounted read-only at the container path,
//! or the directory (or file) `image_sub_path` names inside it.
//!
//! - Checked before anything is made ([`resolve`]): the mount gives no
//!   host path; its image is in the store (NotFound naming it: husk never
//!   pulls for a mount); `image_ref`, when given, is the same image; the
//!   sub path is relative and has no `..`.
//! - Mounted at CreateContainer ([`mount_all`]) under the container's dir,
//!   `<dir>/image-volumes/<n>`: the image's unpacked layers as a read-only
//!   overlay without an upper dir (a single layer: a read-only bind). The
//!   sub path is resolved beneath it with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_MAGICLINKS)`: a symlink out of the image is refused, a
//!   missing one is InvalidArgument. The mount's host path becomes what was
//!   resolved and it is forced read-only; the spec binds it as any other.
//! - Not `noexec`: the KEP dropped it (kubernetes/enhancements#5354) and
//!   neither containerd nor CRI-O sets it; `nosuid` and `nodev` are not set
//!   either, as for the rootfs of the same image.
//! - In a pod with its own user namespace the image's files are seen with
//!   the node's owners (root's as nobody), as containerd's bind shows them
//!   without its idmapped snapshot; the kubelet's mappings on the mount are
//!   dropped so that no idmapped bind of the overlay is attempted.
//! - The mounts go with the container's dir (its removal, or an undone
//!   create, unmounts everything under it). The container's record names
//!   the images, and RemoveImage refuses one a container still mounts.

use super::SpecError;
use crate::api::cri::ContainerConfig;
use crate::image::manager::ImageManager;
use crate::image::ImageRecord;
use crate::sandbox::SandboxError;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::MountFlags;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

/// An image mount of the config: its index in `mounts` and its image.
pub struct Volume {
    pub index: usize,
    pub image: ImageRecord,
}

/// The image mounts of `c`, checked; nothing is made.
pub fn resolve(images: &ImageManager, c: &ContainerConfig) -> Result<Vec<Volume>, SandboxError> {
    let mut out = Vec::new();
    for (index, m) in c.mounts.iter().enumerate() {
        let Some(spec) = &m.image else { continue };
        let what = format!("image volume at {:?}", m.container_path);
        if !m.host_path.is_empty() {
            return Err(SandboxError::Invalid(format!(
                "{what}: host_path must be empty when image is set (got {:?})",
                m.host_path
            )));
        }
        if spec.image.trim().is_empty() && spec.image_ref.is_empty() {
            return Err(SandboxError::Invalid(format!(
                "{what}: image.image is required"
            )));
        }
        check_sub_path(&m.image_sub_path).map_err(|SpecError(e)| {
            SandboxError::Invalid(format!("{what}: image_sub_path {:?} {e}", m.image_sub_path))
        })?;
        let find = |name: &str| {
            images.find(name).ok_or_else(|| {
                SandboxError::NotFound(format!(
                    "{what}: image {name:?} not found (the kubelet pulls an image volume's image first)"
                ))
            })
        };
        let image = if spec.image.trim().is_empty() {
            find(&spec.image_ref)?
        } else {
            find(&spec.image)?
        };
        if !spec.image_ref.is_empty() && !spec.image.trim().is_empty() {
            let by_ref = find(&spec.image_ref)?;
            if by_ref.id != image.id {
                return Err(SandboxError::Invalid(format!(
                    "{what}: image {:?} is {} but image_ref {:?} is {}",
                    spec.image, image.id, spec.image_ref, by_ref.id
                )));
            }
        }
        out.push(Volume { index, image });
    }
    Ok(out)
}

/// A sub path must be relative, without `..`: it names something inside
/// the image, never beside it.
fn check_sub_path(sub: &str) -> Result<(), SpecError> {
    if sub.starts_with('/') {
        return Err(SpecError("must be a relative path".into()));
    }
    if Path::new(sub)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(SpecError(
            "must not contain '..' (it would climb out of the image)".into(),
        ));
    }
    Ok(())
}

/// Mounts each volume of `vols` under `dir` and points its mount of `c`
/// at it (read-only, no id mappings).
pub fn mount_all(
    images: &ImageManager,
    c: &mut ContainerConfig,
    dir: &Path,
    vols: &[Volume],
) -> Result<(), SandboxError> {
    for v in vols {
        let target = dir.join("image-volumes").join(v.index.to_string());
        std::fs::create_dir_all(&target).map_err(SandboxError::io("create an image volume dir"))?;
        mount_image(images, &v.image, &target)?;
        let m = &mut c.mounts[v.index];
        let host = beneath(&target, &m.image_sub_path).map_err(|e| {
            SandboxError::Invalid(format!(
                "image volume at {:?}: image_sub_path {:?} {e} in image {}",
                m.container_path, m.image_sub_path, v.image.id
            ))
        })?;
        m.host_path = host.display().to_string();
        m.readonly = true;
        m.uid_mappings.clear();
        m.gid_mappings.clear();
    }
    Ok(())
}

/// The image's layers at `target`, read-only.
fn mount_image(
    images: &ImageManager,
    image: &ImageRecord,
    target: &Path,
) -> Result<(), SandboxError> {
    let mut lowers = images.layer_dirs(image)?;
    lowers.reverse();
    let io = |what: &'static str| move |e: Errno| SandboxError::io(what)(e.into());
    match lowers.as_slice() {
        [] => Err(SandboxError::Invalid(format!(
            "image {} has no layers",
            image.id
        ))),
        [one] => {
            rustix::mount::mount_bind(one, target).map_err(io("bind an image volume"))?;
            rustix::mount::mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")
                .map_err(io("make an image volume read-only"))
        }
        many => {
            let lower: Vec<String> = many.iter().map(|p| p.display().to_string()).collect();
            let data = CString::new(format!("lowerdir={}", lower.join(":")))
                .map_err(|e| SandboxError::Invalid(e.to_string()))?;
            rustix::mount::mount(
                "overlay",
                target,
                "overlay",
                MountFlags::RDONLY,
                data.as_c_str(),
            )
            .map_err(io("mount an image volume"))
        }
    }
}

/// `sub` resolved beneath `root` (symlinks that stay inside followed):
/// the path it names.
fn beneath(root: &Path, sub: &str) -> Result<PathBuf, String> {
    let sub = if sub.is_empty() { "." } else { sub };
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot be opened: {e}"))?;
    let fd = crate::sys::openat2(
        &dir,
        sub,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        Errno::NOENT | Errno::NOTDIR => "does not exist".to_string(),
        Errno::XDEV => "leaves the image (a symlink out of it is not followed)".to_string(),
        Errno::LOOP => "is a symlink loop".to_string(),
        e => format!("cannot be resolved: {e}"),
    })?;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("cannot be resolved: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_paths_stay_inside() {
        for ok in ["", "data", "data/sub", "./data", "data/"] {
            assert!(check_sub_path(ok).is_ok(), "{ok}");
        }
        for bad in ["/data", "../data", "data/../../x", ".."] {
            assert!(check_sub_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn symlinks_out_are_refused_and_inside_followed() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("data/sub")).expect("mkdir");
        std::os::unix::fs::symlink("../../..", root.join("data/escape")).expect("symlink");
        std::os::unix::fs::symlink("sub", root.join("data/inside")).expect("symlink");
        std::os::unix::fs::symlink("/etc", root.join("data/abs")).expect("symlink");
        assert_eq!(
            beneath(&root, "data/inside").expect("inside"),
            root.join("data/sub")
        );
        assert_eq!(beneath(&root, "").expect("root"), root);
        assert!(beneath(&root, "data/escape")
            .expect_err("out")
            .contains("leaves the image"));
        assert!(beneath(&root, "data/abs")
            .expect_err("abs")
            .contains("leaves the image"));
        assert_eq!(
            beneath(&root, "missing").expect_err("missing"),
            "does not exist"
        );
    }
}
