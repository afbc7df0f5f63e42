//! ListPodSandboxStats: every ready pod's stats, with filters: id (or
//! prefix) and label selector. The filter is shared with
//! StreamPodSandboxStats.

use super::sandbox_stats::to_cri_pod;
use crate::api::cri::*;
use crate::container::stats::Reading;
use crate::sandbox::manager::SandboxRecord;
use crate::server::instrument::State;
use tonic::Status;

/// Whether `r` passes the filter.
pub(super) fn keep(f: &PodSandboxStatsFilter, r: &SandboxRecord) -> bool {
    (f.id.is_empty() || r.id.starts_with(&f.id))
        && super::args::selected(&f.label_selector, &r.labels)
}

pub async fn handle(
    state: &State,
    req: ListPodSandboxStatsRequest,
) -> Result<ListPodSandboxStatsResponse, Status> {
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    let list = tokio::task::spawn_blocking(move || {
        containers.sandbox_usages(|r| keep(&f, r), Reading::Stats)
    })
    .await
    .map_err(|e| Status::internal(format!("stats task: {e}")))?;
    Ok(ListPodSandboxStatsResponse {
        stats: list.iter().map(to_cri_pod).collect(),
    })
}
