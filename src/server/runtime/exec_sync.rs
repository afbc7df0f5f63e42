//! ExecSync: a command in a running container, its output and exit code;
//! DeadlineExceeded when the timeout kills it.

use crate::api::cri::{ExecSyncRequest, ExecSyncResponse};
use crate::server::instrument::State;
use std::time::Duration;
use tonic::Status;

pub async fn handle(state: &State, req: ExecSyncRequest) -> Result<ExecSyncResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    let timeout = Duration::from_secs(req.timeout.max(0) as u64);
    let (stdout, stderr, exit_code) = state
        .containers()?
        .exec_sync(&req.container_id, req.cmd, timeout)
        .await?;
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code,
    })
}
