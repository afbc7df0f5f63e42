//! RemoveContainer: stops it first; idempotent; an unknown id is success.

use crate::api::cri::{RemoveContainerRequest, RemoveContainerResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: RemoveContainerRequest,
) -> Result<RemoveContainerResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    state.containers()?.remove(&req.container_id).await?;
    Ok(RemoveContainerResponse {})
}
