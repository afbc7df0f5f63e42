//! RemoveImage: by ID, tag or digest; an unknown image is success (CRI).

use crate::api::cri::{RemoveImageRequest, RemoveImageResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(state: &State, req: RemoveImageRequest) -> Result<RemoveImageResponse, Status> {
    let images = state.images()?;
    let name = super::spec_name(req.image.as_ref())?.to_string();
    tokio::task::spawn_blocking(move || images.remove(&name))
        .await
        .map_err(|e| Status::internal(format!("remove task: {e}")))??;
    Ok(RemoveImageResponse {})
}
