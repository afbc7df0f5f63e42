//! StreamPodSandboxes: ListPodSandbox's pods, filtered alike, as a stream
//! of bounded chunks (`server/chunks.rs`), each pod read when its turn
//! comes.

use super::sandbox_list::{keep, to_cri};
use crate::api::cri::*;
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use tonic::Status;

pub type Stream = ListStream<StreamPodSandboxesResponse>;

pub async fn handle(state: &State, req: StreamPodSandboxesRequest) -> Result<Stream, Status> {
    let sandboxes = state.sandboxes()?;
    let f = req.filter.unwrap_or_default();
    Ok(stream(
        move || {
            let ids = sandboxes.list_ids();
            ids.into_iter()
                .filter_map(move |id| sandboxes.get(&id))
                .filter(move |r| keep(&f, r))
                .map(|r| to_cri(&r))
        },
        |pod_sandboxes| StreamPodSandboxesResponse { pod_sandboxes },
    ))
}
