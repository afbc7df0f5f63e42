//! ListContainers with filters: id (or prefix), pod, state, labels. The
//! filter and the CRI form are shared with StreamContainers.

use super::container_status::state_of;
use crate::api::cri::*;
use crate::container::record::ContainerRecord;
use crate::server::instrument::State;
use tonic::Status;

/// Whether `r` passes the filter.
pub(super) fn keep(f: &ContainerFilter, r: &ContainerRecord) -> bool {
    (f.id.is_empty() || r.id.starts_with(&f.id))
        && (f.pod_sandbox_id.is_empty() || r.sandbox_id.starts_with(&f.pod_sandbox_id))
        && f.state
            .as_ref()
            .map(|s| s.state == state_of(r))
            .unwrap_or(true)
        && super::args::selected(&f.label_selector, &r.labels)
}

/// A container in the list's form.
pub(super) fn to_cri(r: &ContainerRecord) -> Container {
    Container {
        id: r.id.clone(),
        pod_sandbox_id: r.sandbox_id.clone(),
        metadata: Some(ContainerMetadata {
            name: r.name.clone(),
            attempt: r.attempt,
        }),
        image: Some(ImageSpec {
            image: r.image.clone(),
            image_ref: r.image_ref.clone(),
            ..Default::default()
        }),
        image_ref: r.image_ref.clone(),
        state: state_of(r),
        created_at: r.created_at,
        labels: r.labels.clone().into_iter().collect(),
        annotations: r.annotations.clone().into_iter().collect(),
        image_id: r.image_ref.clone(),
    }
}

pub async fn handle(
    state: &State,
    req: ListContainersRequest,
) -> Result<ListContainersResponse, Status> {
    let containers = state.containers()?;
    let f = req.filter.unwrap_or_default();
    let pre = ContainerFilter {
        state: None,
        ..f.clone()
    };
    let list = tokio::task::spawn_blocking(move || containers.list_where(|r| keep(&pre, r)))
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
    let containers = list.iter().filter(|r| keep(&f, r)).map(to_cri).collect();
    Ok(ListContainersResponse { containers })
}
