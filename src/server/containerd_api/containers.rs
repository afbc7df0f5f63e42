//! Containers/Get: a container's (or a pod sandbox's) image, by id.

use crate::api::containerd_services::containers::{
    container::Runtime, containers_server, Container, GetContainerRequest, GetContainerResponse,
};
use crate::server::instrument::State;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct Containers(pub Arc<State>);

#[tonic::async_trait]
impl containers_server::Containers for Containers {
    async fn get(
        &self,
        req: Request<GetContainerRequest>,
    ) -> Result<Response<GetContainerResponse>, Status> {
        let id = req.into_inner().id;
        let found = if let Some(c) = self.0.containers()?.get_or_creating(&id) {
            Some((c.image_ref, c.sandbox_id, c.labels.into_iter().collect()))
        } else {
            // A sandbox's task runs the pause image.
            self.0.sandboxes()?.get(&id).map(|p| {
                let image = self
                    .0
                    .sandbox_image
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                (image, p.id, p.labels.into_iter().collect())
            })
        };
        let (image, sandbox, labels) =
            found.ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
        Ok(Response::new(GetContainerResponse {
            container: Some(Container {
                id,
                labels,
                image,
                runtime: Some(Runtime::default()),
                snapshotter: "overlayfs".into(),
                snapshot_key: String::new(),
                sandbox,
            }),
        }))
    }
}
