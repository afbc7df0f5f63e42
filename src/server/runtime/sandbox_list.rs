//! ListPodSandbox with filters: id (or unique prefix), state, labels.

use super::sandbox_status::{metadata, state_of};
use crate::api::cri::*;
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    req: ListPodSandboxRequest,
) -> Result<ListPodSandboxResponse, Status> {
    let sandboxes = state.sandboxes()?;
    let f = req.filter.unwrap_or_default();
    let items = sandboxes
        .list()
        .into_iter()
        .filter(|r| f.id.is_empty() || r.id.starts_with(&f.id))
        .filter(|r| {
            f.state
                .as_ref()
                .map(|s| s.state == state_of(r))
                .unwrap_or(true)
        })
        .filter(|r| {
            f.label_selector
                .iter()
                .all(|(k, v)| r.labels.get(k) == Some(v))
        })
        .map(|r| PodSandbox {
            id: r.id.clone(),
            metadata: Some(metadata(&r)),
            state: state_of(&r),
            created_at: r.created_at,
            labels: r.labels.clone().into_iter().collect(),
            annotations: r.annotations.clone().into_iter().collect(),
            runtime_handler: r.runtime_handler.clone(),
        })
        .collect();
    Ok(ListPodSandboxResponse { items })
}
