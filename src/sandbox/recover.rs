//! Recovery at start of what a killed server left half-made.
//!
//! A RunPodSandbox that never wrote its record (the server was killed
//! mid-way) left some prefix of its steps on the host: a sandbox dir with
//! `config.pb`, a shim, namespace pins, the shm and rootfs mounts, a CNI
//! attachment with an IP lease, the pause's cgroup. None of it is listed,
//! so none of it would ever be removed by a client. Each such sandbox is
//! undone here, entirely, before the server serves: every step is found
//! from the sandbox id and the saved config alone (the paths are
//! deterministic), and every undo tolerates a step that never happened.
//!
//! The same holds for state that outlived a record: a shim dir or a
//! namespace dir whose sandbox is gone, and a spare (a shim and
//! namespaces made ahead for the next pod, `spare.rs`).

use super::manager::{cgroup_parent, SandboxManager};
use super::shim_call::{shim_call, wait_gone};
use crate::api::shim::{shim_request::Request, DeleteRequest, ShutdownRequest};
use crate::network::cni::NetworkList;
use crate::network::netns::{self, Kind as NsKind};
use crate::shim::client;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Whether `path` is a mount point (a pinned namespace is one).
fn is_mount_point(path: &Path) -> bool {
    crate::sys::mounts_under(path).iter().any(|m| m == path)
}

impl SandboxManager {
    /// Ids with state on the host but no record: unfinished RunPodSandbox
    /// calls and remnants of interrupted removals.
    pub(super) fn unrecorded(&self) -> BTreeSet<String> {
        let recorded = self.lock_inner();
        let mut ids = BTreeSet::new();
        for dir in [
            self.paths.root.join("sandboxes"),
            self.paths.state.join("s"),
            self.paths.state.join("ns"),
        ] {
            for ent in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let id = ent.file_name().to_string_lossy().into_owned();
                if !recorded.records.contains_key(&id) {
                    ids.insert(id);
                }
            }
        }
        ids
    }

    /// Undoes every step an unfinished RunPodSandbox of `id` may have
    /// taken. Errors are logged, never fatal: the server must start.
    pub(super) fn discard(&self, id: &str) {
        // A spare (`spare.rs`) has no sandbox dir and never had a network.
        let spare = !self.sandbox_dir(id).exists();
        if spare {
            tracing::info!(pod_sandbox_id = %id, "removing a spare");
        } else {
            tracing::warn!(pod_sandbox_id = %id, "undoing an unfinished pod sandbox");
        }
        let config = self.saved_config(id);
        let shim_dir = self.shim_dir(id);
        // The pod's netns: pinned on the node, or, in the pod's own mount
        // namespace (`podns`), held here while its shim still runs, as the
        // pin goes with the shim.
        let net_pin = netns::pin_path(&self.paths.state, NsKind::Net, id);
        let on_node = is_mount_point(&net_pin);
        let held = client::pid(&shim_dir)
            .filter(|_| !on_node)
            .and_then(|p| u32::try_from(p).ok())
            .and_then(|p| super::podns::hold_netns(&super::podns::seen(p, &net_pin)));
        // The shim: its containers (the pause, and any container created
        // in it) are deleted, then it exits. A shim that died with
        // libcontainer state left is replaced by a fresh one for this.
        for _ in 0..2 {
            let youki = shim_dir.join("youki");
            let has_state = std::fs::read_dir(&youki)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if client::pid(&shim_dir).is_none() {
                if !has_state {
                    break;
                }
                if let Err(e) = client::ensure(&self.paths.exe, &shim_dir) {
                    tracing::warn!(pod_sandbox_id = %id, error = %e, "no shim to clean up with");
                    break;
                }
            }
            for ent in std::fs::read_dir(&youki).into_iter().flatten().flatten() {
                let cid = ent.file_name().to_string_lossy().into_owned();
                let _ = shim_call(
                    &shim_dir,
                    Request::Delete(DeleteRequest {
                        id: cid,
                        force: true,
                    }),
                );
            }
            let _ = shim_call(
                &shim_dir,
                Request::Delete(DeleteRequest {
                    id: id.to_string(),
                    force: true,
                }),
            );
            let _ = shim_call(&shim_dir, Request::Shutdown(ShutdownRequest::default()));
            wait_gone(&shim_dir, Duration::from_secs(10));
        }
        // A shim the killed server was still starting has no pid file yet.
        if client::kill_strays(&shim_dir) > 0 {
            tracing::warn!(pod_sandbox_id = %id, "killed a shim that never finished starting");
        }
        // The network: DEL only where ADD could have run (a pinned netns).
        let del_ns = match &held {
            Some(f) => Some(super::podns::held_path(f)),
            None => on_node.then(|| net_pin.clone()),
        };
        if let (false, Some(ns)) = (spare, del_ns) {
            let md = config.metadata.clone().unwrap_or_default();
            match NetworkList::load_first(&self.paths.cni_conf_dir) {
                Ok(Some(net)) => {
                    let att = self.attachment(id, &ns, &md, &config);
                    if let Err(e) = self.cni().del(&net, &att) {
                        tracing::warn!(pod_sandbox_id = %id, error = %e, "CNI DEL of an unfinished pod sandbox failed");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pod_sandbox_id = %id, error = %e, "no CNI config to undo an unfinished pod sandbox with")
                }
            }
        }
        // The pause's cgroup, if libcontainer made it but never recorded it.
        let cgroups_path =
            crate::cgroup::Driver::current().cgroups_path(&cgroup_parent(&config), id);
        crate::cgroup::remove(crate::cgroup::Layout::host(), &cgroups_path);
        // Mounts (shm, rootfs), pins, dirs.
        let dir = self.sandbox_dir(id);
        for m in crate::sys::mounts_under(&dir) {
            if let Err(e) = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
                tracing::warn!(mount = %m.display(), error = %e, "unmount");
            }
        }
        let pins = [NsKind::Net, NsKind::Ipc, NsKind::Uts]
            .map(|kind| netns::pin_path(&self.paths.state, kind, id));
        let user = super::userns::pin_path(&self.paths.state, id);
        for p in pins.iter().chain([&user]) {
            if let Err(e) = netns::remove(p) {
                tracing::warn!(pod_sandbox_id = %id, error = %e, "remove namespace pin");
            }
        }
        for d in [self.paths.state.join("ns").join(id), shim_dir, dir] {
            match std::fs::remove_dir_all(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(dir = %d.display(), error = %e, "remove"),
            }
        }
    }
}
