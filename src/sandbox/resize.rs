//! UpdatePodSandboxResources (pod-level in-place resize): the pod's new
//! overhead and total resources, validated and recorded in its saved
//! PodSandboxConfig (`config.pb`: `linux.overhead`, `linux.resources`),
//! which PodSandboxStatus reports (verbose).
//!
//! The kubelet calls it after it has resized the pod's cgroup, which is
//! its own (the `cgroup_parent` it gave): husk owns no pod-level cgroup
//! (its containers' and the pause's cgroups have their own limits, which
//! UpdateContainerResources sets), so nothing is written to a cgroup here.
//! A memory limit below what the pod's cgroups hold now is refused as
//! UpdateContainerResources refuses it: FailedPrecondition.

use super::manager::SandboxManager;
use super::SandboxError;
use crate::api::cri::LinuxContainerResources;
use crate::cgroup::resources::ResourceError;
use crate::cgroup::validate;
use crate::cgroup::Layout;
use crate::store::atomic;
use prost::Message;

impl SandboxManager {
    /// Records pod `id`'s new `overhead` and `resources` (None: unchanged).
    /// `working_set` is what the pod's cgroups hold now, if known.
    pub async fn update_resources(
        &self,
        id: &str,
        overhead: Option<LinuxContainerResources>,
        resources: Option<LinuxContainerResources>,
        working_set: Option<u64>,
    ) -> Result<(), SandboxError> {
        for r in overhead.iter().chain(resources.iter()) {
            validate(r, Layout::host())?;
        }
        if let (Some(r), Some(ws)) = (&resources, working_set) {
            if r.memory_limit_in_bytes > 0 && (r.memory_limit_in_bytes as u64) < ws {
                return Err(ResourceError::BelowUsage {
                    what: "pod",
                    limit: r.memory_limit_in_bytes as u64,
                    working_set: ws,
                }
                .into());
            }
        }
        let _lock = self.locks.lock(id).await;
        if self.get(id).is_none() {
            return Err(SandboxError::NotFound(format!(
                "pod sandbox {id} not found"
            )));
        }
        let mut cfg = self.saved_config(id);
        let linux = cfg.linux.get_or_insert_with(Default::default);
        if overhead.is_some() {
            linux.overhead = overhead;
        }
        if resources.is_some() {
            linux.resources = resources;
        }
        atomic::write_state_file(
            &self.sandbox_dir(id).join("config.pb"),
            &cfg.encode_to_vec(),
        )
        .map_err(SandboxError::io("record the pod's resources"))?;
        tracing::info!(pod_sandbox_id = %id, "pod sandbox resources updated");
        Ok(())
    }
}
