//! CreateContainer: in a ready pod, from a pulled image; the image is
//! required and the log path must stay inside the pod's log directory.

use crate::api::cri::{CreateContainerRequest, CreateContainerResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: CreateContainerRequest,
) -> Result<CreateContainerResponse, Status> {
    let containers = state.containers()?;
    let config = req
        .config
        .ok_or_else(|| Status::invalid_argument("config is required"))?;
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    if config.image.as_ref().is_none_or(|i| i.image.is_empty()) {
        return Err(Status::invalid_argument("config.image.image is required"));
    }
    // The log lands under the pod's log_directory and nowhere else.
    if std::path::Path::new(&config.log_path)
        .components()
        .any(|x| !matches!(x, std::path::Component::Normal(_)))
    {
        return Err(Status::invalid_argument(format!(
            "config.log_path {:?} must be relative to the pod's log_directory, without ..",
            config.log_path
        )));
    }
    let id = containers.create(&req.pod_sandbox_id, config).await?;
    Ok(CreateContainerResponse { container_id: id })
}
