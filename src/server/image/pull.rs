//! PullImage: credentials from the request, then the image store's pull.
//! Answers the image ID (the config digest), as containerd does.
//!
//! `image.runtime_handler` (the RuntimeClass the image is pulled for) must
//! name a configured handler; every handler runs this node's platform
//! from the one store, so the pull is the same for each.

use crate::api::cri::{PullImageRequest, PullImageResponse};
use crate::image::auth::Credentials;
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(state: &State, req: PullImageRequest) -> Result<PullImageResponse, Status> {
    let images = state.images()?;
    let name = super::spec_name(req.image.as_ref())?;
    if let Some(h) = req.image.as_ref().map(|i| &i.runtime_handler) {
        state.handlers.current().get(h)?;
    }
    let creds = match &req.auth {
        Some(a) => Credentials::from_cri(
            &a.username,
            &a.password,
            &a.auth,
            &a.identity_token,
            &a.registry_token,
        )
        .map_err(|e| Status::invalid_argument(format!("auth: {e}")))?,
        None => Credentials::default(),
    };
    let t0 = std::time::Instant::now();
    let rec = images.pull(name, &creds).await;
    crate::sys::release_memory();
    let rec = rec.map_err(tonic::Status::from);
    crate::metrics::pull(rec.as_ref().map(drop).map_err(|s| s.code()), t0.elapsed());
    let rec = rec?;
    Ok(PullImageResponse { image_ref: rec.id })
}
