//! StreamContainers: ListContainers' containers, filtered alike, as a
//! stream of bounded chunks (`server/chunks.rs`), each record refreshed
//! (its exit read) when its turn comes.

use super::container_list::{keep, to_cri};
use crate::api::cri::*;
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use tonic::Status;

pub type Stream = ListStream<StreamContainersResponse>;

pub async fn handle(state: &State, req: StreamContainersRequest) -> Result<Stream, Status> {
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    Ok(stream(
        move || {
            let ids = containers.ids();
            ids.into_iter()
                .filter_map(move |id| containers.refresh(&id))
                .filter(move |r| keep(&f, r))
                .map(|r| to_cri(&r))
        },
        |containers| StreamContainersResponse { containers },
    ))
}
