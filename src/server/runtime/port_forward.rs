//! PortForward: checks the pod sandbox exists and is ready, then returns a
//! single-use URL on the streaming server. A host-network pod forwards to
//! the host's loopback. The ports (used by the WebSocket channel form) must
//! be 1..=65535.

use crate::api::cri::{PortForwardRequest, PortForwardResponse};
use crate::sandbox::manager::SandboxState;
use crate::server::instrument::State;
use crate::streaming::tokens::Pending;
use tonic::Status;

pub async fn handle(state: &State, req: PortForwardRequest) -> Result<PortForwardResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("missing required pod_sandbox_id"));
    }
    let ports = req
        .port
        .iter()
        .map(|p| {
            u16::try_from(*p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| Status::invalid_argument(format!("port {p} is out of range")))
        })
        .collect::<Result<Vec<u16>, Status>>()?;
    let sandboxes = state.sandboxes()?;
    let id = sandboxes.resolve(&req.pod_sandbox_id).ok_or_else(|| {
        Status::not_found(format!("pod sandbox {} not found", req.pod_sandbox_id))
    })?;
    let rec = sandboxes
        .get(&id)
        .ok_or_else(|| Status::not_found(format!("pod sandbox {id} not found")))?;
    if rec.state != SandboxState::Ready {
        return Err(Status::failed_precondition(format!(
            "pod sandbox {id} is not ready"
        )));
    }
    let url = state
        .streaming()?
        .url_for(Pending::PortForward { sandbox: id, ports })
        .ok_or_else(|| Status::resource_exhausted("too many streaming requests in flight"))?;
    Ok(PortForwardResponse { url })
}
