//! Containers as NRI plugins see them, and their adjustment at create.
//!
//! A container is described from its record and its OCI spec
//! (`config.json`), as containerd describes one from its spec; a pod from
//! its record (`nri::convert`). At CreateContainer the plugins' chain
//! adjusts the spec before it is written (`adjust_spec`).

use super::manager::ContainerManager;
use super::record::{ContainerRecord, ContainerState};
use crate::api::nri as api;
use crate::nri::convert;
use crate::sandbox::SandboxError;
use serde_json::Value;
use std::sync::Arc;

fn state(s: ContainerState) -> api::ContainerState {
    match s {
        ContainerState::Created => api::ContainerState::ContainerCreated,
        ContainerState::Running => api::ContainerState::ContainerRunning,
        ContainerState::Exited => api::ContainerState::ContainerStopped,
        ContainerState::Unknown => api::ContainerState::ContainerUnknown,
    }
}

/// `rec` with its spec, for plugins.
fn describe(rec: &ContainerRecord, spec: &Value) -> api::Container {
    convert::container(
        &convert::Facts {
            id: &rec.id,
            pod_id: &rec.sandbox_id,
            name: &rec.name,
            state: state(rec.state),
            labels: rec.labels.clone().into_iter().collect(),
            pid: 0,
            created_at: rec.created_at,
            started_at: rec.started_at,
            finished_at: rec.finished_at,
            exit_code: rec.exit_code,
            reason: &rec.reason,
            message: &rec.message,
        },
        spec,
    )
}

impl ContainerManager {
    /// Hands the container manager the NRI plugins' chain.
    pub fn set_nri(&self, nri: Arc<crate::nri::Nri>) {
        let _ = self.nri.set(nri);
    }

    /// The NRI chain, when there is one.
    pub fn nri(&self) -> Option<Arc<crate::nri::Nri>> {
        self.nri.get().cloned()
    }

    /// Container `id` and its pod, as plugins see them.
    pub fn nri_view(&self, id: &str) -> Option<(api::PodSandbox, api::Container)> {
        let rec = self.get(id)?;
        let pod = self.sandboxes.get(&rec.sandbox_id)?;
        let spec: Value =
            serde_json::from_slice(&std::fs::read(self.dir(id).join("config.json")).ok()?).ok()?;
        Some((convert::pod(&pod), describe(&rec, &spec)))
    }

    /// The chain and container `id` with its pod, when a plugin is there
    /// to be told of an event.
    pub(super) fn nri_event(
        &self,
        id: &str,
    ) -> Option<(Arc<crate::nri::Nri>, api::PodSandbox, api::Container)> {
        let nri = self.nri.get().filter(|n| n.has_plugins())?.clone();
        let (pod, c) = self.nri_view(id)?;
        Some((nri, pod, c))
    }

    /// The chain and pod `id`, when a plugin is there to be told of an
    /// event.
    pub fn nri_pod(&self, id: &str) -> Option<(Arc<crate::nri::Nri>, api::PodSandbox)> {
        let nri = self.nri.get().filter(|n| n.has_plugins())?.clone();
        let pod = self.sandboxes.get(id)?;
        Some((nri, convert::pod(&pod)))
    }

    /// Every pod and container, for a new plugin's `Synchronize`.
    pub fn nri_snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let pods = self.sandboxes.list().iter().map(convert::pod).collect();
        let containers = self
            .list()
            .iter()
            .filter_map(|r| {
                let spec: Value = serde_json::from_slice(
                    &std::fs::read(self.dir(&r.id).join("config.json")).ok()?,
                )
                .ok()?;
                Some(describe(r, &spec))
            })
            .collect();
        (pods, containers)
    }

    /// What applies a plugin's unsolicited updates (through the path of
    /// UpdateContainerResources, without NRI's own events) and evictions
    /// (a stop). Answers the updates that failed and were not marked
    /// `ignore_failure`.
    pub fn nri_updates(self: &Arc<Self>) -> crate::nri::Updates {
        let me = Arc::downgrade(self);
        Arc::new(move |req: api::UpdateContainersRequest| {
            let me = me.clone();
            Box::pin(async move {
                let me = me.upgrade().ok_or("the container manager is gone")?;
                let mut failed = Vec::new();
                for u in req.update {
                    let Some(res) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                        continue;
                    };
                    let base = me
                        .saved_config(&u.container_id)
                        .and_then(|c| c.linux)
                        .and_then(|l| l.resources)
                        .unwrap_or_default();
                    let new = crate::nri::resources::from_nri(res, &base);
                    if let Err(e) = me.update_task(&u.container_id, new).await {
                        tracing::warn!(container_id = %u.container_id, error = %e, "an NRI plugin's update failed");
                        if !u.ignore_failure {
                            failed.push(u);
                        }
                    }
                }
                for e in req.evict {
                    tracing::warn!(container_id = %e.container_id, reason = %e.reason, "an NRI plugin evicts the container");
                    if let Err(err) = me.stop(&e.container_id, std::time::Duration::ZERO).await {
                        tracing::warn!(container_id = %e.container_id, error = %err, "eviction failed");
                    }
                }
                Ok(failed)
            })
        })
    }

    /// The plugins' adjustments of a new container's `spec` (a blocking
    /// thread's call). A refusal, a conflict or a plugin's error refuses
    /// the container.
    pub(super) fn adjust_spec(
        &self,
        pod: &crate::sandbox::manager::SandboxRecord,
        rec: &ContainerRecord,
        spec: &mut Value,
    ) -> Result<(), SandboxError> {
        let Some(nri) = self.nri.get().filter(|n| n.has_plugins()) else {
            return Ok(());
        };
        let dirs = self
            .cdi_dirs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let cdi = move |names: &[String], spec: &mut Value| -> Result<(), String> {
            let found = crate::cdi::resolve(&dirs, names)?;
            crate::cdi::apply(spec, &found)
        };
        let classes = self
            .blockio_config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let blockio = move |class: &str| crate::cgroup::blockio_class::oci(&classes, class);
        let node = crate::nri::adjust::Node {
            cdi: &cdi,
            blockio: &blockio,
        };
        let container = describe(rec, spec);
        tokio::runtime::Handle::current()
            .block_on(nri.create_container(&convert::pod(pod), &container, spec, &node))
            .map_err(SandboxError::Refused)
    }
}
