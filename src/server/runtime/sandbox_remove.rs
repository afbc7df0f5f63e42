//! RemovePodSandbox: stops first; idempotent; an unknown id is success.
//! Removing a sandbox raises its DELETED event, carrying its last status.

use crate::api::cri::{RemovePodSandboxRequest, RemovePodSandboxResponse};
use crate::container::events::Kind;
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
    let mut removed = None;
    if let Some(id) = sandboxes.resolve(&req.pod_sandbox_id) {
        let containers = state.containers()?;
        for c in containers.of_sandbox(&id) {
            containers.remove(&c).await?;
        }
        removed = sandboxes.get(&id).map(|r| (r, containers.nri_pod(&id)));
    }
    sandboxes.remove(&req.pod_sandbox_id).await?;
    if let Some((r, nri)) = removed {
        if let Some((nri, pod)) = nri {
            nri.remove_pod_sandbox(&pod).await;
        }
        let id = r.id.clone();
        state
            .containers()?
            .emit_sandbox(Kind::Deleted, &id, Some(r));
    }
    Ok(RemovePodSandboxResponse {})
}
