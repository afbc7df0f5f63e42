//! UpdateRuntimeConfig: the node's pod CIDR, kept across restarts and
//! given to CNI plugins that declare the `ipRanges` capability (see
//! `network/pod_cidr.rs`). An empty CIDR changes nothing, as in containerd.

use crate::api::cri::{UpdateRuntimeConfigRequest, UpdateRuntimeConfigResponse};
use crate::network::pod_cidr;
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: UpdateRuntimeConfigRequest,
) -> Result<UpdateRuntimeConfigResponse, Status> {
    let cidr = req
        .runtime_config
        .and_then(|c| c.network_config)
        .map(|n| n.pod_cidr)
        .unwrap_or_default();
    if cidr.is_empty() {
        return Ok(UpdateRuntimeConfigResponse {});
    }
    pod_cidr::parse(&cidr).map_err(Status::invalid_argument)?;
    // Pods are attached only once recovery is done; so is this.
    state.sandboxes()?;
    let root = state.cfg.root.clone();
    let to_save = cidr.clone();
    tokio::task::spawn_blocking(move || pod_cidr::save(&root, &to_save))
        .await
        .map_err(|e| Status::internal(format!("save task: {e}")))?
        .map_err(|e| Status::internal(format!("record the pod CIDR: {e}")))?;
    tracing::info!(pod_cidr = %cidr, "pod CIDR updated");
    Ok(UpdateRuntimeConfigResponse {})
}
