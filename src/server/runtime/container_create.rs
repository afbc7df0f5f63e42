//! CreateContainer: in a ready pod, from a pulled image.

use crate::api::cri::{CreateContainerRequest, CreateContainerResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: CreateContainerRequest,
) -> Result<CreateContainerResponse, Status> {
    let containers = state.containers()?;
    let config = req
        .config
        .ok_or_else(|| Status::invalid_argument("config is required"))?;
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    let id = containers.create(&req.pod_sandbox_id, config).await?;
    Ok(CreateContainerResponse { container_id: id })
}
