//! StreamPodSandboxMetrics: ListPodSandboxMetrics' metrics (ready pods)
//! as a stream of bounded chunks (`server/chunks.rs`), each pod read when
//! its turn comes.

use super::sandbox_metrics::pod_metrics;
use crate::api::cri::*;
use crate::container::stats::Reading;
use crate::sandbox::manager::SandboxState;
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use tonic::Status;

pub type Stream = ListStream<StreamPodSandboxMetricsResponse>;

pub async fn handle(state: &State, _req: StreamPodSandboxMetricsRequest) -> Result<Stream, Status> {
    let sandboxes = state.sandboxes()?;
    let containers = state.containers()?;
    Ok(stream(
        move || {
            let ids = sandboxes.list_ids();
            ids.into_iter().filter_map(move |id| {
                sandboxes
                    .get(&id)
                    .filter(|r| r.state == SandboxState::Ready)?;
                let u = containers.sandbox_usage(&id, Reading::Metrics).ok()?;
                Some(pod_metrics(&u, |c| containers.saved_config(c)))
            })
        },
        |pod_sandbox_metrics| StreamPodSandboxMetricsResponse {
            pod_sandbox_metrics,
        },
    ))
}
