//! A container's mounts in its pod's own mount namespace
//! (`mount_namespace = "pod"`, `crate::sandbox::podns`).
//!
//! CreateContainer makes the rootfs, the image's and the idmapped volumes
//! under the container's dir in the node's namespace as always, then hands
//! them all to the pod ([`hand_over`]). A bind source the pod's namespace
//! does not see as the node does (a volume the kubelet mounted after the
//! pod's monitor started, on a node whose root is not shared) is first
//! bound under the container's dir (`binds/<n>`) and handed over with the
//! rest ([`stage_unseen`]), so the container gets the node's view of it.
//! A namespace the node pinned since is joined through the monitor's hold
//! on the node's root (`podns::reach_namespaces`). Removal unmounts inside
//! the pod's namespace ([`unmount_in_pod`]).

use crate::api::cri::ContainerConfig;
use crate::sandbox::manager::SandboxRecord;
use crate::sandbox::podns;
use crate::sandbox::SandboxError;
use std::path::Path;

/// The pid of the monitor whose mount namespace holds `pod`'s mounts;
/// None when the pod keeps them in the node's. A pod whose monitor is gone
/// has lost its namespace, and with it its pins and shm.
pub fn monitor(pod: &SandboxRecord, shim_dir: &Path) -> Result<Option<u32>, SandboxError> {
    if !pod.own_mount_ns {
        return Ok(None);
    }
    crate::shim::client::pid(shim_dir)
        .and_then(|p| u32::try_from(p).ok())
        .map(Some)
        .ok_or_else(|| {
            SandboxError::Shim(format!(
                "the shim of pod sandbox {} is gone, and with it the pod's mount namespace",
                pod.id
            ))
        })
}

/// Binds each source of `c`'s mounts that the pod of monitor `pid` does not
/// see as the node does under `dir/binds/<n>`, and names that instead. A
/// bind of a shared mount is its peer, and so is the clone handed over:
/// a Bidirectional volume staged so still reaches the node.
pub fn stage_unseen(pid: u32, c: &mut ContainerConfig, dir: &Path) -> Result<(), SandboxError> {
    if c.mounts.is_empty() {
        return Ok(());
    }
    let info = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let (node, pod) = (
        info("/proc/self/mountinfo"),
        info(&format!("/proc/{pid}/mountinfo")),
    );
    // The pods' own mounts, and the server's on the node, are under these.
    let skip = crate::shim::client::own_mount_ns_dirs();
    for (n, m) in c.mounts.iter_mut().enumerate() {
        let host = Path::new(&m.host_path);
        // The same file, in a mount at the same point with the same
        // propagation, with the same mounts below it: a copy the pod took
        // at its start, or a peer that propagated in. A dir bound onto
        // itself after the pod started (as critest makes its shared and
        // slave volumes) is the same file in a mount the pod does not
        // have; a tmpfs the node mounted inside a volume since, a mount
        // below it the pod lacks.
        if host.starts_with(dir)
            || (podns::same_in_pod(pid, host)
                && super::mounts::mount_of(host, &node) == super::mounts::mount_of(host, &pod)
                && super::mounts::mounts_below(host, &node, &skip)
                    == super::mounts::mounts_below(host, &pod, &skip))
        {
            continue;
        }
        let at = dir.join("binds").join(n.to_string());
        let made = if host.is_dir() {
            std::fs::create_dir_all(&at)
        } else {
            std::fs::create_dir_all(dir.join("binds")).and_then(|()| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&at)
                    .map(drop)
            })
        };
        made.map_err(SandboxError::io("make a bind for the pod"))?;
        rustix::mount::mount_bind_recursive(host, &at).map_err(|e| {
            SandboxError::io(format!("bind {} for the pod", host.display()))(e.into())
        })?;
        m.host_path = at.to_string_lossy().into_owned();
    }
    Ok(())
}

/// Hands every mount under `dir` to the pod of monitor `pid`.
pub fn hand_over(pid: u32, dir: &Path) -> Result<(), SandboxError> {
    let mounts = crate::sys::mounts_within(dir, 3);
    // Into the namespace of the pod's shim: one killed meanwhile is named.
    podns::adopt(pid, &mounts).map_err(SandboxError::io(format!(
        "hand the container's mounts to its pod's shim (pid {pid})"
    )))
}

/// Unmounts what is mounted under `dir` in the pod of monitor `pid`.
pub fn unmount_in_pod(pid: u32, dir: &Path) -> std::io::Result<()> {
    podns::within(pid, || crate::sys::unmount_within(dir, 3))
}
