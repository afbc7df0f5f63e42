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
    sandboxes.stop(&req.pod_sandbox_id).await?;
    Ok(StopPodSandboxResponse {})
}
