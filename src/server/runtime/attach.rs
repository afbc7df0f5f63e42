//! Attach: checks the container is running and the request streams
//! something, then returns a single-use URL on the streaming server.

use crate::api::cri::{AttachRequest, AttachResponse};
use crate::server::instrument::State;
use crate::streaming::tokens::{Pending, StdioOpts};
use tonic::Status;

/// The kubelet's rules for the stdio flags of Exec and Attach.
pub fn stdio(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<StdioOpts, Status> {
    if tty && stderr {
        return Err(Status::invalid_argument(
            "tty and stderr cannot both be true",
        ));
    }
    if !stdin && !stdout && !stderr {
        return Err(Status::invalid_argument(
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    Ok(StdioOpts {
        stdin,
        stdout,
        stderr,
        tty,
    })
}

pub async fn handle(state: &State, req: AttachRequest) -> Result<AttachResponse, Status> {
    if req.container_id.is_empty() {
        return Err(Status::invalid_argument("missing required container_id"));
    }
    let opts = stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
    let container = state.containers()?.running(&req.container_id)?;
    let url = state
        .streaming()?
        .url_for(Pending::Attach { container, opts })
        .ok_or_else(|| Status::resource_exhausted("too many streaming requests in flight"))?;
    Ok(AttachResponse { url })
}
