//! Recording a container's state changes together with their events.
//!
//! STARTED is raised, and an exit recorded (raising STOPPED), while the
//! record map is locked, so a container's events leave in the order its
//! states were recorded and an exit observed by several callers at once
//! (the exit watcher, a status, a stop) is recorded and raised once. An
//! exit record is written without recreating the container's directory, so
//! a removal that raced with it leaves nothing behind. Pod sandboxes'
//! own events are raised here too, for the sandbox RPCs.

use super::events::Kind;
use super::manager::ContainerManager;
use super::record::{ContainerRecord, ContainerState};
use crate::sandbox::SandboxError;
use crate::store::atomic;
use crate::sys::now_ns;

impl ContainerManager {
    /// Saves `r` and raises `kind` under the map lock.
    pub(super) fn save_raising(&self, r: &ContainerRecord, kind: Kind) -> Result<(), SandboxError> {
        atomic::write_state_json(&self.dir(&r.id).join("container.json"), r)
            .map_err(SandboxError::io("write container record"))?;
        let mut g = self.lock();
        g.0.insert(r.id.clone(), r.clone());
        self.events.emit_container(kind, r);
        Ok(())
    }

    /// Records an exit unless another caller already did (or the container
    /// is gone); only the first raises STOPPED. Returns the record as kept.
    /// NRI's plugins are told the container stopped, as containerd tells
    /// them of an exit.
    pub(super) fn record_exit(&self, r: ContainerRecord) -> ContainerRecord {
        {
            let mut g = self.lock();
            match g.0.get_mut(&r.id) {
                Some(cur) if cur.state == ContainerState::Exited => return cur.clone(),
                Some(cur) => {
                    *cur = r.clone();
                    if r.reason == "OOMKilled" {
                        crate::metrics::get().oom_kills.inc();
                    }
                    self.events.emit_container(Kind::Stopped, &r);
                }
                None => return r,
            }
        }
        if let Some((nri, pod, c)) = self.nri_event(&r.id) {
            nri.container_exited(pod, c);
        }
        // Not recreated if a removal took the directory meanwhile.
        if let Err(e) = atomic::replace_state_json(&self.dir(&r.id).join("container.json"), &r) {
            tracing::debug!(container_id = %r.id, error = %e, "exit record not written");
        }
        r
    }

    /// Raises a pod sandbox's own event (its id stands as the container
    /// id); `last` is its record when the event outlives it (DELETED).
    pub fn emit_sandbox(
        &self,
        kind: Kind,
        sandbox_id: &str,
        last: Option<crate::sandbox::manager::SandboxRecord>,
    ) {
        self.events.send(super::events::Raw {
            kind,
            container_id: sandbox_id.to_string(),
            sandbox_id: sandbox_id.to_string(),
            at: now_ns(),
            sandbox: last.map(Box::new),
            container: None,
        });
    }
}
