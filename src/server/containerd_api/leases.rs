//! Leases: taken around a write and let go. husk's content store keeps a
//! blob while an image references it; a blob a shim wrote is referenced
//! by the labels it sets and is kept until the store's next collection.

use crate::api::containerd_services::leases::{
    leases_server, CreateRequest, CreateResponse, DeleteRequest, Lease,
};
use tonic::{Request, Response, Status};

pub struct Leases;

#[tonic::async_trait]
impl leases_server::Leases for Leases {
    async fn create(
        &self,
        req: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        let r = req.into_inner();
        let id = if r.id.is_empty() {
            format!("husk-{:016x}", rand::random::<u64>())
        } else {
            r.id
        };
        Ok(Response::new(CreateResponse {
            lease: Some(Lease {
                id,
                created_at: Some(super::now()),
                labels: r.labels,
            }),
        }))
    }

    async fn delete(&self, _req: Request<DeleteRequest>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}
