//! ListImages: every image, or the one the filter's spec names.

use crate::api::cri::{ListImagesRequest, ListImagesResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(state: &State, req: ListImagesRequest) -> Result<ListImagesResponse, Status> {
    let images = state.images()?;
    let wanted = req
        .filter
        .and_then(|f| f.image)
        .map(|s| s.image)
        .filter(|s| !s.trim().is_empty());
    let recs = match wanted {
        Some(spec) => images.find(&spec).into_iter().collect(),
        None => images.list(),
    };
    Ok(ListImagesResponse {
        images: recs.iter().map(|r| super::to_cri(state, r)).collect(),
    })
}
