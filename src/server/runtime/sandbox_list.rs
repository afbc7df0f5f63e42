//! ListPodSandbox with filters: id (or unique prefix), state, labels.
//! The filter and the CRI form are shared with StreamPodSandboxes.

use super::sandbox_status::{metadata, state_of};
use crate::api::cri::*;
use crate::sandbox::manager::SandboxRecord;
use crate::server::instrument::State;
use tonic::Status;

/// Whether `r` passes the filter.
pub(super) fn keep(f: &PodSandboxFilter, r: &SandboxRecord) -> bool {
    (f.id.is_empty() || r.id.starts_with(&f.id))
        && f.state
            .as_ref()
            .map(|s| s.state == state_of(r))
            .unwrap_or(true)
        && super::args::selected(&f.label_selector, &r.labels)
}

/// A pod in the list's form.
pub(super) fn to_cri(r: &SandboxRecord) -> PodSandbox {
    PodSandbox {
        id: r.id.clone(),
        metadata: Some(metadata(r)),
        state: state_of(r),
        created_at: r.created_at,
        labels: r.labels.clone().into_iter().collect(),
        annotations: r.annotations.clone().into_iter().collect(),
        runtime_handler: r.runtime_handler.clone(),
    }
}

pub async fn handle(
    state: &State,
    req: ListPodSandboxRequest,
) -> Result<ListPodSandboxResponse, Status> {
    let sandboxes = state.sandboxes()?;
    let f = req.filter.unwrap_or_default();
    let pre = PodSandboxFilter {
        state: None,
        ..f.clone()
    };
    let items = sandboxes
        .list_where(|r| keep(&pre, r))
        .iter()
        .filter(|r| keep(&f, r))
        .map(to_cri)
        .collect();
    Ok(ListPodSandboxResponse { items })
}
