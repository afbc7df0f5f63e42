//! Undoing a CreateContainer that did not finish: one that failed (its
//! shim killed under it, say) or whose server was killed before the record
//! was written. The container dir names its pod (`sandbox_id`, written
//! first), which is all that is needed: the pod's shim deletes whatever
//! libcontainer made (a fresh shim does it when the pod's one is gone),
//! the cgroup is removed if libcontainer made it but recorded nothing, then
//! the rootfs is unmounted and the dir removed.

use super::manager::{shim_call, ContainerManager};
use crate::api::shim::{shim_request::Request, DeleteRequest};
use crate::shim::client;
use std::path::Path;

impl ContainerManager {
    /// Undoes container `id` of pod `sandbox_id` (which may be unknown:
    /// only the mounts and the dir are removed then).
    pub(super) fn discard(&self, sandbox_id: Option<&str>, id: &str) {
        if let Some(pod) = sandbox_id.filter(|p| !p.is_empty()) {
            let shim_dir = self.sandboxes.shim_dir(pod);
            if let Err(e) = self.sandboxes.ensure_shim(pod, id) {
                tracing::warn!(container_id = %id, error = %e, "no shim to clean up with");
            }
            if let Some(pid) = self
                .sandboxes
                .get(pod)
                .and_then(|r| super::pod_mounts::monitor(&r, &shim_dir).ok().flatten())
            {
                if let Err(e) = super::pod_mounts::unmount_in_pod(pid, &self.dir(id)) {
                    tracing::warn!(container_id = %id, error = %e, "unmount in the pod's mount namespace");
                }
            }
            if client::pid(&shim_dir).is_some() {
                let _ = shim_call(
                    &shim_dir,
                    Request::Delete(DeleteRequest {
                        id: id.to_string(),
                        force: true,
                    }),
                );
            }
            let parent = crate::sandbox::manager::cgroup_parent(&self.sandboxes.saved_config(pod));
            crate::cgroup::remove(
                crate::cgroup::Layout::host(),
                &format!("{}/{id}", parent.trim_end_matches('/')),
            );
        }
        remove_dir(&self.dir(id));
    }
}

/// Unmounts everything under `dir`, then removes it.
pub(super) fn remove_dir(dir: &Path) {
    for m in crate::sys::mounts_under(dir) {
        if let Err(e) = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
            tracing::warn!(mount = %m.display(), error = %e, "unmount");
        }
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "remove"),
    }
}
