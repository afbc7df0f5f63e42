//! RemoveContainer: stops it first; idempotent; an unknown id is success.

use crate::api::cri::{RemoveContainerRequest, RemoveContainerResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: RemoveContainerRequest,
) -> Result<RemoveContainerResponse, Status> {
    state.containers()?.remove(&req.container_id).await?;
    Ok(RemoveContainerResponse {})
}
