//! ContainerStatus: state, times in ns, exit code and reason, the image ID
//! and the identity the first process started with; NotFound for an
//! unknown id.

use crate::api::cri::*;
use crate::container::record::{ContainerRecord, ContainerState as S};
use crate::server::instrument::State;
use std::collections::HashMap;
use tonic::Status;

pub(super) fn state_of(r: &ContainerRecord) -> i32 {
    (match r.state {
        S::Created => ContainerState::ContainerCreated,
        S::Running => ContainerState::ContainerRunning,
        S::Exited => ContainerState::ContainerExited,
        S::Unknown => ContainerState::ContainerUnknown,
    }) as i32
}

pub async fn handle(
    state: &State,
    req: ContainerStatusRequest,
) -> Result<ContainerStatusResponse, Status> {
    super::args::required("container_id", &req.container_id)?;
    let containers = state.containers()?;
    let r = containers
        .resolve(&req.container_id)
        .and_then(|id| containers.refresh(&id))
        .ok_or_else(|| Status::not_found(format!("container {:?} not found", req.container_id)))?;
    let cfg = containers.saved_config(&r.id);
    let image = state.images().ok().and_then(|i| i.find(&r.image_ref));
    let mut info = HashMap::new();
    if req.verbose {
        info.insert(
            "info".to_string(),
            serde_json::to_string(&r).map_err(|e| Status::internal(e.to_string()))?,
        );
    }
    Ok(ContainerStatusResponse {
        status: Some(with_image_names(
            status_of(&r, cfg.as_ref()),
            image.as_ref(),
        )),
        info,
    })
}

/// Names the image as containerd does while the image is still stored:
/// `image.image` is its first tag and `image_ref` its first repo digest
/// (the kubelet shows them as a container's image and imageID); `image_id`
/// stays the image's ID.
pub(super) fn with_image_names(
    mut st: ContainerStatus,
    image: Option<&crate::image::records::ImageRecord>,
) -> ContainerStatus {
    if let Some(img) = image {
        if let (Some(tag), Some(spec)) = (img.repo_tags.first(), st.image.as_mut()) {
            spec.image = tag.clone();
        }
        if let Some(d) = img.repo_digests.first() {
            st.image_ref = d.clone();
        }
    }
    st
}

/// The CRI status of a record (and the config it was created from).
pub(super) fn status_of(r: &ContainerRecord, cfg: Option<&ContainerConfig>) -> ContainerStatus {
    ContainerStatus {
        id: r.id.clone(),
        metadata: Some(ContainerMetadata {
            name: r.name.clone(),
            attempt: r.attempt,
        }),
        state: state_of(r),
        created_at: r.created_at,
        started_at: r.started_at,
        finished_at: r.finished_at,
        exit_code: r.exit_code,
        image: Some(ImageSpec {
            image: r.image.clone(),
            user_specified_image: cfg
                .and_then(|c| c.image.as_ref())
                .map(|i| i.user_specified_image.clone())
                .unwrap_or_default(),
            ..Default::default()
        }),
        image_ref: r.image_ref.clone(),
        image_id: r.image_ref.clone(),
        user: r.user.as_ref().map(|u| ContainerUser {
            linux: Some(LinuxContainerUser {
                uid: u.uid.into(),
                gid: u.gid.into(),
                supplemental_groups: u
                    .supplemental_groups
                    .iter()
                    .map(|g| i64::from(*g))
                    .collect(),
            }),
        }),
        reason: r.reason.clone(),
        message: r.message.clone(),
        labels: r.labels.clone().into_iter().collect(),
        annotations: r.annotations.clone().into_iter().collect(),
        log_path: r.log_path.clone(),
        // The signal StopContainer sends: the config's, else the image's,
        // else SIGTERM (as containerd reports it).
        stop_signal: crate::container::signal::to_cri(r.stop_signal) as i32,
        mounts: cfg.map(|c| c.mounts.clone()).unwrap_or_default(),
        resources: cfg
            .and_then(|c| c.linux.as_ref())
            .and_then(|l| l.resources.clone())
            .map(|linux| ContainerResources {
                linux: Some(linux),
                ..Default::default()
            }),
    }
}
