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
    // The node's resource plugins see the pod; one that fails it fails
    // the run, and the pod is undone.
    if let Some((nri, pod)) = state.containers()?.nri_pod(&id) {
        if let Err(e) = nri.run_pod_sandbox(&pod).await {
            nri.remove_pod_sandbox(&pod).await;
            let _ = sandboxes.stop(&id).await;
            let _ = sandboxes.remove(&id).await;
            return Err(Status::failed_precondition(format!(
                "NRI RunPodSandbox failed: {e}"
            )));
        }
    }
    if let Ok(c) = state.containers() {
        c.emit_sandbox(Kind::Created, &id, None);
        c.emit_sandbox(Kind::Started, &id, None);
    }
    Ok(RunPodSandboxResponse { pod_sandbox_id: id })
}
