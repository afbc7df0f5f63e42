//! UpdateContainerResources: CPU and memory limits applied live to the
//! container's cgroup and recorded (ContainerStatus reports them); bad
//! values are InvalidArgument, an unknown id NotFound.

use crate::api::cri::{UpdateContainerResourcesRequest, UpdateContainerResourcesResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: UpdateContainerResourcesRequest,
) -> Result<UpdateContainerResourcesResponse, Status> {
    if req.container_id.is_empty() {
        return Err(Status::invalid_argument("container_id is required"));
    }
    let linux = req.linux.ok_or_else(|| {
        Status::invalid_argument("linux resources are required (husk runs Linux containers)")
    })?;
    state
        .containers()?
        .update_resources(&req.container_id, linux)
        .await?;
    Ok(UpdateContainerResourcesResponse {})
}
