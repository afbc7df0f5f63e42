//! Images/Get: an image's manifest descriptor, by any name husk's image
//! store resolves (reference, id, digest).

use crate::api::containerd_services::images::{
    images_server, Descriptor, GetImageRequest, GetImageResponse, Image,
};
use crate::server::instrument::State;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct Images(pub Arc<State>);

#[tonic::async_trait]
impl images_server::Images for Images {
    async fn get(
        &self,
        req: Request<GetImageRequest>,
    ) -> Result<Response<GetImageResponse>, Status> {
        let name = req.into_inner().name;
        let images = self.0.images()?;
        let rec = images
            .find(&name)
            .ok_or_else(|| Status::not_found(format!("image {name:?} not found")))?;
        let path = images.blob_path(&rec.manifest_digest).ok_or_else(|| {
            Status::not_found(format!("manifest {} of {name:?}", rec.manifest_digest))
        })?;
        let body = tokio::fs::read(&path)
            .await
            .map_err(|e| Status::internal(format!("read {}: {e}", path.display())))?;
        let media_type = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["mediaType"].as_str().map(str::to_string))
            .unwrap_or_else(|| crate::image::manifest::OCI_MANIFEST.to_string());
        Ok(Response::new(GetImageResponse {
            image: Some(Image {
                name,
                labels: Default::default(),
                target: Some(Descriptor {
                    media_type,
                    digest: rec.manifest_digest,
                    size: body.len() as i64,
                    annotations: Default::default(),
                }),
            }),
        }))
    }
}
