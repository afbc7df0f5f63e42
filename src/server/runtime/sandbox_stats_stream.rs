//! StreamPodSandboxStats: ListPodSandboxStats' figures (ready pods,
//! filtered alike) as a stream of bounded chunks (`server/chunks.rs`),
//! each pod's cgroups read when its turn comes.

use super::sandbox_stats::to_cri_pod;
use super::sandbox_stats_list::keep;
use crate::api::cri::*;
use crate::container::stats::Reading;
use crate::sandbox::manager::SandboxState;
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use tonic::Status;

pub type Stream = ListStream<StreamPodSandboxStatsResponse>;

pub async fn handle(state: &State, req: StreamPodSandboxStatsRequest) -> Result<Stream, Status> {
    let sandboxes = state.sandboxes()?;
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    Ok(stream(
        move || {
            let ids = sandboxes.list_ids();
            ids.into_iter().filter_map(move |id| {
                let r = sandboxes
                    .get(&id)
                    .filter(|r| r.state == SandboxState::Ready && keep(&f, r))?;
                containers
                    .sandbox_usage(&r.id, Reading::Stats)
                    .ok()
                    .map(|u| to_cri_pod(&u))
            })
        },
        |pod_sandbox_stats| StreamPodSandboxStatsResponse { pod_sandbox_stats },
    ))
}
