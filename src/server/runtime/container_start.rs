//! StartContainer: runs a created container inside its pod's shim.

use crate::api::cri::{StartContainerRequest, StartContainerResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: StartContainerRequest,
) -> Result<StartContainerResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    state.containers()?.start(&req.container_id).await?;
    Ok(StartContainerResponse {})
}
