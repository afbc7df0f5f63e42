//! Version: the runtime's name and versions.

use crate::api::cri::{VersionRequest, VersionResponse};
use crate::server::instrument::State;
use tonic::Status;

/// The CRI version the kubelet negotiates (`version` of the request).
const KUBE_API_VERSION: &str = "0.1.0";

pub async fn handle(_state: &State, _req: VersionRequest) -> Result<VersionResponse, Status> {
    Ok(VersionResponse {
        version: KUBE_API_VERSION.to_string(),
        runtime_name: "husk".to_string(),
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        runtime_api_version: "v1".to_string(),
    })
}
