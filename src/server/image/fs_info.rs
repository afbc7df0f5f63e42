//! ImageFsInfo: bytes and inodes used by the image store and its mountpoint.

use crate::api::cri::{
    FilesystemIdentifier, FilesystemUsage, ImageFsInfoRequest, ImageFsInfoResponse, UInt64Value,
};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    state: &State,
    _req: ImageFsInfoRequest,
) -> Result<ImageFsInfoResponse, Status> {
    let images = state.images()?;
    let (u, mountpoint) =
        tokio::task::spawn_blocking(move || (images.fs_usage(), images.fs_mountpoint()))
            .await
            .map_err(|e| Status::internal(format!("usage task: {e}")))?;
    let usage = FilesystemUsage {
        timestamp: u.timestamp_ns,
        fs_id: Some(FilesystemIdentifier {
            mountpoint: mountpoint.display().to_string(),
        }),
        used_bytes: Some(UInt64Value { value: u.bytes }),
        inodes_used: Some(UInt64Value { value: u.inodes }),
    };
    Ok(ImageFsInfoResponse {
        image_filesystems: vec![usage],
        container_filesystems: Vec::new(),
    })
}
