//! StopContainer(timeout): stop signal, then SIGKILL; idempotent.

use crate::api::cri::{StopContainerRequest, StopContainerResponse};
use crate::server::instrument::State;
use std::time::Duration;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: StopContainerRequest,
) -> Result<StopContainerResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    let timeout = Duration::from_secs(req.timeout.max(0) as u64);
    state.containers()?.stop(&req.container_id, timeout).await?;
    Ok(StopContainerResponse {})
}
