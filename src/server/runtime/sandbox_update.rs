//! UpdatePodSandboxResources: the pod's new overhead and resources,
//! validated and recorded (`sandbox/resize.rs`); an unknown id is
//! NotFound, a memory limit below the pod's working set
//! FailedPrecondition.

use crate::api::cri::{UpdatePodSandboxResourcesRequest, UpdatePodSandboxResourcesResponse};
use crate::container::stats::Reading;
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
        let u = containers.sandbox_usage(&pod, Reading::Metrics).ok()?;
        Some(u.cgroup?.memory?.working_set)
    })
    .await
    .map_err(|e| Status::internal(format!("usage task: {e}")))?;
    // The node's resource plugins see the resize first; one that fails
    // it fails the RPC.
    let nri = state.containers()?.nri_pod(&id);
    if let Some((nri, pod)) = &nri {
        let to = |r: &Option<crate::api::cri::LinuxContainerResources>| {
            r.as_ref().map(crate::nri::resources::to_nri)
        };
        nri.update_pod_sandbox(pod, to(&req.overhead), to(&req.resources))
            .await
            .map_err(|e| {
                Status::failed_precondition(format!("NRI UpdatePodSandbox failed: {e}"))
            })?;
    }
    sandboxes
        .update_resources(&id, req.overhead, req.resources, working_set)
        .await?;
    if let Some((nri, _)) = nri {
        if let Some((_, pod)) = state.containers()?.nri_pod(&id) {
            nri.post_update_pod_sandbox(&pod).await;
        }
    }
    Ok(UpdatePodSandboxResourcesResponse {})
}
