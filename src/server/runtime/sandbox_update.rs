//! UpdatePodSandboxResources: the pod's new overhead and resources,
//! validated and recorded (`sandbox/resize.rs`); an unknown id is
//! NotFound, a memory limit below the pod's working set
//! FailedPrecondition.

use crate::api::cri::{UpdatePodSandboxResourcesRequest, UpdatePodSandboxResourcesResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: UpdatePodSandboxResourcesRequest,
) -> Result<UpdatePodSandboxResourcesResponse, Status> {
    super::args::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let sandboxes = state.sandboxes()?;
    let id = sandboxes.resolve(&req.pod_sandbox_id).ok_or_else(|| {
        Status::not_found(format!("pod sandbox {:?} not found", req.pod_sandbox_id))
    })?;
    let containers = state.containers()?;
    let pod = id.clone();
    let working_set = tokio::task::spawn_blocking(move || {
        let u = containers.sandbox_usage(&pod, false).ok()?;
        Some(u.cgroup?.memory?.working_set)
    })
    .await
    .map_err(|e| Status::internal(format!("usage task: {e}")))?;
    sandboxes
        .update_resources(&id, req.overhead, req.resources, working_set)
        .await?;
    Ok(UpdatePodSandboxResourcesResponse {})
}
