//! StreamImages: ListImages' images (all, or the one the filter's spec
//! names) as a stream of bounded chunks (`server/chunks.rs`), each record
//! read when its turn comes.

use crate::api::cri::{StreamImagesRequest, StreamImagesResponse};
use crate::server::chunks::{stream, ListStream};
use crate::server::instrument::State;
use std::sync::Arc;
use tonic::Status;

pub type Stream = ListStream<StreamImagesResponse>;

pub async fn handle(state: &Arc<State>, req: StreamImagesRequest) -> Result<Stream, Status> {
    let images = state.images()?;
    let wanted = super::list::wanted(req.filter);
    let state = state.clone();
    Ok(stream(
        move || {
            let ids = match &wanted {
                Some(spec) => images.find(spec).map(|r| r.id).into_iter().collect(),
                None => images.ids(),
            };
            ids.into_iter()
                .filter_map(move |id| images.by_id(&id))
                .map(move |r| super::to_cri(&state, &r))
        },
        |images| StreamImagesResponse { images },
    ))
}
