//! The CRI calls of the node managers: the image file system's usage
//! (ImageFsInfo), the images and their removal (ListImages, RemoveImage)
//! for image GC, and container stats (ListContainerStats) for eviction's
//! ranking. Same invariants as `runtime`: deadlines on every call,
//! NotFound on removal counts as done.

use super::runtime::{cri, Cri, CriError, CriResult};
use crate::api::cri::*;

/// The image file system as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageFs {
    pub mountpoint: String,
    pub used_bytes: u64,
    pub inodes_used: u64,
}

/// One container's usage, by pod UID.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerUsage {
    pub pod_uid: String,
    pub working_set: u64,
    pub writable_layer: u64,
}

impl Cri {
    pub async fn image_fs(&self) -> CriResult<Option<ImageFs>> {
        let r = self
            .img
            .clone()
            .image_fs_info(self.req(ImageFsInfoRequest {}))
            .await;
        Ok(cri("ImageFsInfo", r)?
            .image_filesystems
            .into_iter()
            .next()
            .map(|f| ImageFs {
                mountpoint: f.fs_id.map(|i| i.mountpoint).unwrap_or_default(),
                used_bytes: f.used_bytes.map(|v| v.value).unwrap_or(0),
                inodes_used: f.inodes_used.map(|v| v.value).unwrap_or(0),
            }))
    }

    pub async fn list_images(&self) -> CriResult<Vec<Image>> {
        let r = self
            .img
            .clone()
            .list_images(self.req(ListImagesRequest { filter: None }))
            .await;
        Ok(cri("ListImages", r)?.images)
    }

    pub async fn remove_image(&self, id: &str) -> CriResult<()> {
        let r = self
            .img
            .clone()
            .remove_image(self.req(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: id.into(),
                    ..Default::default()
                }),
            }))
            .await;
        match cri(format!("RemoveImage {id}"), r) {
            Err(CriError { status, .. }) if status.code() == tonic::Code::NotFound => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Usage of every container the runtime has stats for.
    pub async fn container_usage(&self) -> CriResult<Vec<ContainerUsage>> {
        let r = self
            .rt
            .clone()
            .list_container_stats(self.req(ListContainerStatsRequest { filter: None }))
            .await;
        Ok(cri("ListContainerStats", r)?
            .stats
            .into_iter()
            .map(|s| ContainerUsage {
                pod_uid: s
                    .attributes
                    .as_ref()
                    .and_then(|a| a.labels.get(super::labels::POD_UID).cloned())
                    .unwrap_or_default(),
                working_set: s
                    .memory
                    .and_then(|m| m.working_set_bytes)
                    .map(|v| v.value)
                    .unwrap_or(0),
                writable_layer: s
                    .writable_layer
                    .and_then(|w| w.used_bytes)
                    .map(|v| v.value)
                    .unwrap_or(0),
            })
            .collect())
    }
}
