//! ListImages: every image, or the one the filter's spec names.

use crate::api::cri::{ListImagesRequest, ListImagesResponse};
use crate::server::instrument::State;
use tonic::Status;

/// The image a list's filter names, if it names one.
pub(super) fn wanted(filter: Option<crate::api::cri::ImageFilter>) -> Option<String> {
    filter
        .and_then(|f| f.image)
        .map(|s| s.image)
        .filter(|s| !s.trim().is_empty())
}

pub async fn handle(state: &State, req: ListImagesRequest) -> Result<ListImagesResponse, Status> {
    let images = state.images()?;
    let wanted = wanted(req.filter);
    let recs = match wanted {
        Some(spec) => images.find(&spec).into_iter().collect(),
        None => images.list(),
    };
    Ok(ListImagesResponse {
        images: recs.iter().map(|r| super::to_cri(state, r)).collect(),
    })
}
