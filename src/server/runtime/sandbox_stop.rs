//! StopPodSandbox: idempotent; an unknown id is success (CRI).

use crate::api::cri::{StopPodSandboxRequest, StopPodSandboxResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: StopPodSandboxRequest,
) -> Result<StopPodSandboxResponse, Status> {
    let sandboxes = state.sandboxes()?;
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    // Its containers first (SIGKILL: the kubelet has stopped them gracefully already).
    if let Some(id) = sandboxes.resolve(&req.pod_sandbox_id) {
        let containers = state.containers()?;
        for c in containers.of_sandbox(&id) {
            containers.stop(&c, std::time::Duration::ZERO).await?;
        }
    }
    sandboxes.stop(&req.pod_sandbox_id).await?;
    Ok(StopPodSandboxResponse {})
}
