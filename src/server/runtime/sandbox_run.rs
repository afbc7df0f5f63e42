//! RunPodSandbox: validate, then the sandbox manager's transactional run;
//! raises the sandbox's CREATED and STARTED events, as containerd does.

use crate::api::cri::{RunPodSandboxRequest, RunPodSandboxResponse};
use crate::container::events::Kind;
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: RunPodSandboxRequest,
) -> Result<RunPodSandboxResponse, Status> {
    let sandboxes = state.sandboxes()?;
    let config = req
        .config
        .ok_or_else(|| Status::invalid_argument("config is required"))?;
    state.handlers.current().get(&req.runtime_handler)?;
    let id = sandboxes.run(config, req.runtime_handler).await?;
    if let Ok(c) = state.containers() {
        c.emit_sandbox(Kind::Created, &id, None);
        c.emit_sandbox(Kind::Started, &id, None);
    }
    Ok(RunPodSandboxResponse { pod_sandbox_id: id })
}
