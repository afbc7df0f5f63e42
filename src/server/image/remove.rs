//! RemoveImage: by ID, tag or digest; an unknown image is success (CRI).
//! An image a container still mounts as an image volume is kept:
//! FailedPrecondition naming the container (its removal frees the image).

use crate::api::cri::{RemoveImageRequest, RemoveImageResponse};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(state: &State, req: RemoveImageRequest) -> Result<RemoveImageResponse, Status> {
    let images = state.images()?;
    let name = super::spec_name(req.image.as_ref())?.to_string();
    if let (Some(img), Ok(containers)) = (images.find(&name), state.containers()) {
        if let Some(c) = containers.volume_user(&img.id) {
            return Err(Status::failed_precondition(format!(
                "image {name:?} ({}) is mounted as an image volume by container {c}: remove the container first",
                img.id
            )));
        }
    }
    tokio::task::spawn_blocking(move || images.remove(&name))
        .await
        .map_err(|e| Status::internal(format!("remove task: {e}")))??;
    Ok(RemoveImageResponse {})
}
