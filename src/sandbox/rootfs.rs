//! The root filesystem of the pause or of a container: an overlay of the
//! image's snapshots at `<dir>/rootfs` over `<dir>/upper` and
//! `<dir>/work`, with the layers idmapped when the pod has its own user
//! namespace (see `crate::idmap::mount::overlay`).

use super::userns::PodUserns;
use super::SandboxError;
use crate::image::manager::ImageManager;
use crate::image::ImageRecord;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Mounts the rootfs of `image` under `dir`.
pub fn mount(
    images: &ImageManager,
    image: &ImageRecord,
    dir: &Path,
    userns: Option<&PodUserns>,
) -> Result<(), SandboxError> {
    let (rootfs, upper, work) = (dir.join("rootfs"), dir.join("upper"), dir.join("work"));
    let Some(u) = userns else {
        let opts = images.rootfs_options(image, &upper, &work)?;
        return crate::sys::mount_overlay(&rootfs, &opts)
            .map_err(SandboxError::io("mount the rootfs"));
    };
    let mut lowers = images.layer_dirs(image)?;
    lowers.reverse();
    // The root directory's owner in the image, as the pod sees it.
    let top = lowers
        .first()
        .and_then(|l| std::fs::metadata(l).ok())
        .and_then(|m| u.to_host(m.uid(), m.gid()))
        .unwrap_or_else(|| u.root());
    let fd = crate::idmap::mount::open_userns(&u.pin)
        .map_err(SandboxError::io("open the pod's user namespace"))?;
    crate::idmap::mount::overlay(
        &rootfs,
        &lowers,
        &upper,
        &work,
        fd.as_fd(),
        &dir.join("idmap"),
        top,
    )?;
    Ok(())
}
