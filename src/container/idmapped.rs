//! A container of a pod with its own user namespace: its user namespace
//! options checked against the pod's, and the mounts the kubelet sends
//! with id mappings made idmapped.
//!
//! The kubelet (`UserNamespacesSupport`) repeats the pod's mappings on
//! each mount of a `hostUsers: false` pod: the volume is to be seen
//! through the pod's user namespace, so that what is root's on the node is
//! the pod root's inside. Each such mount is made once, idmapped, at
//! `<container dir>/idmap-mounts/<n>`, and the spec bind-mounts that (a
//! bind keeps the idmapping); removing the container's dir unmounts it
//! with the rootfs. A mount without mappings is bound as it is: the node's
//! owners, seen from inside as unmapped (nobody), and files the pod
//! creates there are owned by its host ids.

use crate::api::cri::ContainerConfig;
use crate::sandbox::userns::{self, PodUserns, Userns};
use crate::sandbox::SandboxError;
use std::os::fd::AsFd;
use std::path::Path;

/// Checks the container's own user namespace options against the pod's:
/// none or the pod's (the kubelet repeats them); a container never gets a
/// user namespace its pod does not have.
pub fn check(c: &ContainerConfig, pod: Option<&PodUserns>) -> Result<(), SandboxError> {
    let opts = c
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .and_then(|n| n.userns_options.as_ref());
    let asked = userns::parse(opts).map_err(SandboxError::Invalid)?;
    match (&asked, pod) {
        (Userns::Node, _) if opts.is_none() => Ok(()),
        (Userns::Node, None) => Ok(()),
        (Userns::Pod { uids, gids }, Some(p)) if *uids == p.uids && *gids == p.gids => Ok(()),
        (Userns::Node, Some(_)) => Err(SandboxError::Invalid(
            "userns_options: the container asks for the node's users, but its pod has its own \
             user namespace"
                .into(),
        )),
        (Userns::Pod { .. }, None) => Err(SandboxError::Invalid(
            "userns_options: the container asks for a user namespace, but its pod runs with \
             the node's users"
                .into(),
        )),
        (Userns::Pod { .. }, Some(_)) => Err(SandboxError::Invalid(
            "userns_options: the container's id mappings differ from its pod's".into(),
        )),
    }
}

/// Replaces the host path of each mount of `c` that has id mappings with
/// an idmapped mount of it under `dir`. The mappings must be the pod's.
pub fn mount_all(
    c: &mut ContainerConfig,
    dir: &Path,
    pod: Option<&PodUserns>,
) -> Result<(), SandboxError> {
    let wanted =
        |m: &crate::api::cri::Mount| !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty();
    if !c.mounts.iter().any(wanted) {
        return Ok(());
    }
    let Some(u) = pod else {
        return Err(SandboxError::Invalid(
            "mounts with id mappings need a pod with its own user namespace".into(),
        ));
    };
    let userns_fd = crate::idmap::mount::open_userns(&u.pin)
        .map_err(SandboxError::io("open the pod's user namespace"))?;
    let base = dir.join("idmap-mounts");
    for (i, m) in c.mounts.iter_mut().enumerate() {
        if !wanted(m) {
            continue;
        }
        let same = |maps: &[crate::api::cri::IdMapping], r: crate::idmap::IdRange| matches!(maps, [x] if x.container_id == r.container_id && x.host_id == r.host_id && x.length == r.length);
        if !same(&m.uid_mappings, u.uids) || !same(&m.gid_mappings, u.gids) {
            return Err(SandboxError::Invalid(format!(
                "mount {:?}: its id mappings must be the pod's (one uid and one gid mapping, \
                 {}:{}:{})",
                m.container_path, u.uids.container_id, u.uids.host_id, u.uids.length
            )));
        }
        let src = Path::new(&m.host_path);
        let is_dir = std::fs::metadata(src)
            .map_err(SandboxError::io(format!("mount source {}", src.display())))?
            .is_dir();
        let at = base.join(i.to_string());
        std::fs::create_dir_all(&base).map_err(SandboxError::io("create idmapped mount dir"))?;
        if is_dir {
            std::fs::create_dir(&at)
        } else {
            std::fs::write(&at, b"")
        }
        .map_err(SandboxError::io("create idmapped mount point"))?;
        crate::idmap::mount::bind(src, &at, userns_fd.as_fd(), true)?;
        m.host_path = at.display().to_string();
    }
    Ok(())
}
