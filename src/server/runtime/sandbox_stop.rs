//! StopPodSandbox: idempotent; an unknown id is success (CRI). Stopping a
//! ready sandbox raises its STOPPED event.

use crate::api::cri::{StopPodSandboxRequest, StopPodSandboxResponse};
use crate::container::events::Kind;
use crate::sandbox::manager::SandboxState;
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
    let mut was_ready = None;
    if let Some(id) = sandboxes.resolve(&req.pod_sandbox_id) {
        let containers = state.containers()?;
        for c in containers.of_sandbox(&id) {
            containers.stop(&c, std::time::Duration::ZERO).await?;
        }
        if sandboxes.get(&id).map(|r| r.state) == Some(SandboxState::Ready) {
            was_ready = Some(id);
        }
    }
    sandboxes.stop(&req.pod_sandbox_id).await?;
    if let Some(id) = was_ready {
        let containers = state.containers()?;
        if let Some((nri, pod)) = containers.nri_pod(&id) {
            nri.stop_pod_sandbox(&pod).await;
        }
        containers.emit_sandbox(Kind::Stopped, &id, None);
    }
    Ok(StopPodSandboxResponse {})
}
