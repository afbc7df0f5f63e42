//! UpdateContainerResources: new CPU and memory limits applied live to a
//! created or running container's cgroup, then recorded.
//!
//! Order: validate (InvalidArgument before anything changes), apply to the
//! cgroup (whole or not at all, see `resources.rs`), then record the merged
//! resources in the saved CRI config (`config.pb`, which ContainerStatus
//! reports) and in the OCI spec (`config.json`). The container's own lock
//! is held throughout, so two updates never interleave.

use super::manager::{err, ContainerManager, ContainerState};
use crate::api::cri::LinuxContainerResources;
use crate::cgroup::resources;
use crate::cgroup::Layout;
use crate::sandbox::SandboxError;
use crate::store::atomic;
use prost::Message;
use std::sync::Arc;

impl ContainerManager {
    /// Applies `new` (zero fields unchanged) to container `id`.
    pub async fn update_resources(
        self: &Arc<Self>,
        id: &str,
        new: LinuxContainerResources,
    ) -> Result<(), SandboxError> {
        let id = self
            .resolve(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id}")))?;
        resources::validate(&new, Layout::host())?;
        let _l = self.locks.lock(&id).await;
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.update_blocking(&id, &new))
            .await
            .map_err(err)?
    }

    fn update_blocking(&self, id: &str, new: &LinuxContainerResources) -> Result<(), SandboxError> {
        let r = self
            .refresh(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id}")))?;
        if !matches!(r.state, ContainerState::Created | ContainerState::Running) {
            return Err(SandboxError::Invalid(format!(
                "container {id} is neither created nor running"
            )));
        }
        let mut new = new.clone();
        let parent = r
            .cgroups_path
            .rsplit_once('/')
            .map(|(p, _)| p)
            .unwrap_or("");
        crate::cgroup::prune_unsupported(Layout::host(), parent, &mut new);
        let new = &new;
        resources::apply(Layout::host(), &r.cgroups_path, new)?;

        let dir = self.dir(id);
        let mut cfg = self.saved_config(id).unwrap_or_default();
        let linux = cfg.linux.get_or_insert_with(Default::default);
        let merged = resources::merge(&linux.resources.clone().unwrap_or_default(), new);
        linux.resources = Some(merged.clone());
        atomic::write_file(&dir.join("config.pb"), &cfg.encode_to_vec())
            .map_err(SandboxError::io("record container resources"))?;
        let spec_path = dir.join("config.json");
        if let Ok(Some(mut spec)) = atomic::read_json::<serde_json::Value>(&spec_path) {
            if let Some(res) = spec.get_mut("linux").and_then(|l| l.get_mut("resources")) {
                super::spec::set_resources(res, &merged);
                atomic::write_json(&spec_path, &spec)
                    .map_err(SandboxError::io("record resources in the container spec"))?;
            }
        }
        tracing::info!(container_id = %id, "container resources updated");
        Ok(())
    }
}
