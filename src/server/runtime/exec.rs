//! Exec: checks the container is running and the request streams
//! something (not stderr with a tty, as the kubelet requires), then
//! returns a single-use URL on the streaming server.

use crate::api::cri::{ExecRequest, ExecResponse};
use crate::server::instrument::State;
use crate::streaming::tokens::Pending;
use tonic::Status;

pub async fn handle(state: &State, req: ExecRequest) -> Result<ExecResponse, Status> {
    if req.container_id.is_empty() {
        return Err(Status::invalid_argument("missing required container_id"));
    }
    if req.cmd.is_empty() {
        return Err(Status::invalid_argument("cmd is required"));
    }
    let opts = super::attach::stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
    let container = state.containers()?.running(&req.container_id)?;
    let url = state
        .streaming()?
        .url_for(Pending::Exec {
            container,
            cmd: req.cmd,
            opts,
        })
        .ok_or_else(|| Status::resource_exhausted("too many streaming requests in flight"))?;
    Ok(ExecResponse { url })
}
