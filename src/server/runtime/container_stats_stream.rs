//! StreamContainerStats: ListContainerStats' figures, filtered alike, as a
//! stream of bounded chunks (`server/chunks.rs`), each container's
//! cgroup read when its turn comes.

use super::container_stats::to_cri;
use super::container_stats_list::keep;
use crate::api::cri::*;
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use tonic::Status;

pub type Stream = ListStream<StreamContainerStatsResponse>;

pub async fn handle(state: &State, req: StreamContainerStatsRequest) -> Result<Stream, Status> {
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    Ok(stream(
        move || {
            let ids = containers.ids();
            ids.into_iter().filter_map(move |id| {
                let r = containers.get(&id).filter(|r| keep(&f, r))?;
                Some(to_cri(&containers.usage(r)))
            })
        },
        |container_stats| StreamContainerStatsResponse { container_stats },
    ))
}
