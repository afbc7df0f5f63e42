//! husk's admin API (proto/husk/v1/admin.proto): image import, pull
//! progress and the stage timings of the mutating RPCs, which CRI has no
//! RPCs for.

use super::instrument::{observe, Op, State};
use crate::api::admin::admin_server;
use crate::api::admin::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct Admin {
    state: Arc<State>,
}

impl Admin {
    pub fn new(state: Arc<State>) -> Admin {
        Admin { state }
    }
}

#[tonic::async_trait]
impl admin_server::Admin for Admin {
    async fn import_image(
        &self,
        r: Request<ImportImageRequest>,
    ) -> Result<Response<ImportImageResponse>, Status> {
        let state = self.state.clone();
        observe("ImportImage", Op::Mutate, async move {
            let req = r.into_inner();
            let images = state.images()?;
            let tag = (!req.tag.is_empty()).then_some(req.tag.as_str());
            let recs = images.import(std::path::Path::new(&req.path), tag).await;
            crate::sys::release_memory();
            let recs = recs?;
            Ok(ImportImageResponse {
                images: recs
                    .into_iter()
                    .map(|r| ImportedImage {
                        id: r.id,
                        repo_tags: r.repo_tags,
                        repo_digests: r.repo_digests,
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn timings(
        &self,
        r: Request<TimingsRequest>,
    ) -> Result<Response<TimingsResponse>, Status> {
        let stages = crate::timing::samples(r.into_inner().clear)
            .into_iter()
            .map(|s| StageTimings {
                op: s.op,
                stage: s.stage,
                external: s.external,
                micros: s.samples.iter().map(|d| d.as_micros() as u64).collect(),
            })
            .collect();
        Ok(Response::new(TimingsResponse { stages }))
    }

    async fn list_pulls(
        &self,
        _r: Request<ListPullsRequest>,
    ) -> Result<Response<ListPullsResponse>, Status> {
        let images = self.state.images()?;
        let pulls = images
            .pulls()
            .iter()
            .map(|p| PullProgress {
                image_ref: p.reference.clone(),
                bytes_done: p.bytes_done.load(Ordering::Relaxed),
                bytes_total: p.bytes_total.load(Ordering::Relaxed),
                layers_done: p.layers_done.load(Ordering::Relaxed) as u32,
                layers_total: p.layers_total.load(Ordering::Relaxed) as u32,
            })
            .collect();
        Ok(Response::new(ListPullsResponse { pulls }))
    }
}
