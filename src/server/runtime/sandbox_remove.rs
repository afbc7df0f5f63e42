//! RemovePodSandbox: stops first; idempotent; an unknown id is success.

use crate::api::cri::{RemovePodSandboxRequest, RemovePodSandboxResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: RemovePodSandboxRequest,
) -> Result<RemovePodSandboxResponse, Status> {
    let sandboxes = state.sandboxes()?;
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    if let Some(id) = sandboxes.resolve(&req.pod_sandbox_id) {
        let containers = state.containers()?;
        for c in containers.of_sandbox(&id) {
            containers.remove(&c).await?;
        }
    }
    sandboxes.remove(&req.pod_sandbox_id).await?;
    Ok(RemovePodSandboxResponse {})
}
