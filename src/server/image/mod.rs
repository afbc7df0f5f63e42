//! The CRI ImageService: one file per RPC, all thin over `ImageManager`.

mod fs_info;
mod list;
mod pull;
mod remove;
mod status;
mod stream;

use super::instrument::{observe, Op, State};
use crate::api::cri::image_service_server::ImageService;
use crate::api::cri::*;
use crate::image::ImageRecord;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct Images {
    state: Arc<State>,
}

impl Images {
    pub fn new(state: Arc<State>) -> Images {
        Images { state }
    }
}

type Res<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl ImageService for Images {
    async fn list_images(&self, r: Request<ListImagesRequest>) -> Res<ListImagesResponse> {
        observe(
            "ListImages",
            Op::Read,
            list::handle(&self.state, r.into_inner()),
        )
        .await
    }
    type StreamImagesStream = stream::Stream;
    async fn stream_images(
        &self,
        r: Request<StreamImagesRequest>,
    ) -> Res<Self::StreamImagesStream> {
        observe(
            "StreamImages",
            Op::Read,
            stream::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn image_status(&self, r: Request<ImageStatusRequest>) -> Res<ImageStatusResponse> {
        observe(
            "ImageStatus",
            Op::Read,
            status::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn pull_image(&self, r: Request<PullImageRequest>) -> Res<PullImageResponse> {
        observe(
            "PullImage",
            Op::Mutate,
            pull::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn remove_image(&self, r: Request<RemoveImageRequest>) -> Res<RemoveImageResponse> {
        observe(
            "RemoveImage",
            Op::Mutate,
            remove::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn image_fs_info(&self, r: Request<ImageFsInfoRequest>) -> Res<ImageFsInfoResponse> {
        observe(
            "ImageFsInfo",
            Op::Read,
            fs_info::handle(&self.state, r.into_inner()),
        )
        .await
    }
}

/// The CRI view of an image record. The sandbox image is pinned, so the
/// kubelet's image GC never removes it (as containerd does).
pub(crate) fn to_cri(state: &State, rec: &ImageRecord) -> Image {
    let sandbox_image = state
        .sandbox_image
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let sandbox = crate::reference::Reference::parse(&sandbox_image)
        .ok()
        .and_then(|r| {
            r.tagged()
                .or_else(|| r.digest.as_ref().map(|d| r.with_digest(d)))
        });
    let pinned = rec.pinned || sandbox.is_some_and(|s| rec.refs().any(|r| r == s));
    // Config `User` is "uid", "uid:gid", "name" or "name:group".
    let user = rec.user.split(':').next().unwrap_or("");
    // A uid the runtime would refuse (beyond 2^31-1) is never reported as
    // one: as a username, the kubelet's runAsNonRoot check cannot pass on
    // it.
    let digits = !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit());
    let (uid, username) = match user.parse::<u32>() {
        Ok(n) if digits && n <= crate::security::ids::MAX_ID => {
            (Some(Int64Value { value: n.into() }), String::new())
        }
        _ => (None, user.to_string()),
    };
    Image {
        id: rec.id.clone(),
        repo_tags: rec.repo_tags.clone(),
        repo_digests: rec.repo_digests.clone(),
        size: rec.size,
        uid,
        username,
        spec: Some(ImageSpec {
            image: rec.id.clone(),
            ..Default::default()
        }),
        pinned,
    }
}

/// The image named by a request's spec, which must not be empty.
pub(crate) fn spec_name(spec: Option<&ImageSpec>) -> Result<&str, Status> {
    match spec.map(|s| s.image.trim()) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Status::invalid_argument("image spec must name an image")),
    }
}
