//! ListContainerStats with filters: id (or unique prefix), pod sandbox id
//! (or prefix), label selector. The filter is shared with
//! StreamContainerStats.

use super::container_stats::to_cri;
use crate::api::cri::*;
use crate::container::record::ContainerRecord;
use crate::server::instrument::State;
use tonic::Status;

/// Whether `r` passes the filter.
pub(super) fn keep(f: &ContainerStatsFilter, r: &ContainerRecord) -> bool {
    (f.id.is_empty() || r.id.starts_with(&f.id))
        && (f.pod_sandbox_id.is_empty() || r.sandbox_id.starts_with(&f.pod_sandbox_id))
        && super::args::selected(&f.label_selector, &r.labels)
}

pub async fn handle(
    state: &State,
    req: ListContainerStatsRequest,
) -> Result<ListContainerStatsResponse, Status> {
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    let list = tokio::task::spawn_blocking(move || containers.container_usages(|r| keep(&f, r)))
        .await
        .map_err(|e| Status::internal(format!("stats task: {e}")))?;
    Ok(ListContainerStatsResponse {
        stats: list.iter().map(to_cri).collect(),
    })
}
