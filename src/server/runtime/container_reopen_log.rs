//! ReopenContainerLog: the shim reopens the log file at its path.

use crate::api::cri::{ReopenContainerLogRequest, ReopenContainerLogResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: ReopenContainerLogRequest,
) -> Result<ReopenContainerLogResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    state.containers()?.reopen_log(&req.container_id).await?;
    Ok(ReopenContainerLogResponse {})
}
