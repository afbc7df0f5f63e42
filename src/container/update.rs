//! UpdateContainerResources: new CPU and memory limits applied live to a
//! created or running container's cgroup, then recorded.
//!
//! Order: validate (InvalidArgument before anything changes), apply to the
//! cgroup (whole or not at all, see `resources.rs`; under the systemd
//! driver, systemd's limits as properties of the scope; a shim v2
//! runtime's container through its shim's Update), then record the merged
//! resources in the saved CRI config (`config.pb`, which ContainerStatus
//! reports) and in the OCI spec (`config.json`). The container's own lock
//! is held throughout, so two updates never interleave.

use super::manager::{err, ContainerManager};
use super::record::ContainerState;
use crate::api::cri::LinuxContainerResources;
use crate::cgroup::Layout;
use crate::cgroup::{resources, systemd};
use crate::sandbox::SandboxError;
use crate::store::atomic;
use prost::Message;
use std::sync::Arc;

impl ContainerManager {
    /// Applies `new` (zero fields unchanged) to container `id`, without
    /// NRI's events (`lifecycle.rs`).
    pub(super) async fn update_task(
        self: &Arc<Self>,
        id: &str,
        new: LinuxContainerResources,
    ) -> Result<(), SandboxError> {
        let id = self
            .resolve(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        crate::cgroup::validate(&new, Layout::host())?;
        let _l = self.locks.lock(&id).await;
        let this = self.clone();
        crate::otel::spawn_blocking(move || this.update_blocking(&id, &new))
            .await
            .map_err(err)?
    }

    fn update_blocking(&self, id: &str, new: &LinuxContainerResources) -> Result<(), SandboxError> {
        let r = self
            .refresh(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        if !matches!(r.state, ContainerState::Created | ContainerState::Running) {
            return Err(SandboxError::Invalid(format!(
                "container {id} is neither created nor running"
            )));
        }
        let mut new = new.clone();
        crate::cgroup::prune_unsupported(Layout::host(), &r.cgroups_path, &mut new);
        let new = &new;
        let mut cfg = self.saved_config(id).unwrap_or_default();
        let linux = cfg.linux.get_or_insert_with(Default::default);
        let merged = resources::merge(&linux.resources.clone().unwrap_or_default(), new);
        if self.under_shim(&r.sandbox_id) {
            // The shim's runtime applies them (a VM's guest cgroup, too).
            let mut oci = serde_json::json!({});
            crate::oci::set_resources(&mut oci, &merged);
            let body = serde_json::to_vec(&oci).map_err(err)?;
            super::manager::shim_call(
                &self.sandboxes.shim_dir(&r.sandbox_id),
                crate::api::shim::shim_request::Request::Update(crate::api::shim::UpdateRequest {
                    id: id.to_string(),
                    resources: body,
                }),
            )?;
        } else if crate::cgroup::systemd::unit_of(&r.cgroups_path).is_some() {
            // systemd's own limits as properties of the scope, the rest
            // (hugetlb, other unified keys) in its files.
            resources::check_memory_limit(Layout::host(), &r.cgroups_path, new)?;
            resources::apply(Layout::host(), &r.cgroups_path, &systemd::leftovers(new))?;
            systemd::set_properties(&r.cgroups_path, id, &systemd::as_properties(new))?;
        } else {
            resources::apply(Layout::host(), &r.cgroups_path, new)?;
        }

        let dir = self.dir(id);
        if let Some(l) = cfg.linux.as_mut() {
            l.resources = Some(merged.clone());
        }
        atomic::write_state_file(&dir.join("config.pb"), &cfg.encode_to_vec())
            .map_err(SandboxError::io("record container resources"))?;
        let spec_path = dir.join("config.json");
        if let Ok(Some(mut spec)) = atomic::read_json::<serde_json::Value>(&spec_path) {
            if let Some(res) = spec.get_mut("linux").and_then(|l| l.get_mut("resources")) {
                crate::oci::set_resources(res, &merged);
                atomic::write_state_json(&spec_path, &spec)
                    .map_err(SandboxError::io("record resources in the container spec"))?;
            }
        }
        tracing::info!(container_id = %id, "container resources updated");
        Ok(())
    }
}
