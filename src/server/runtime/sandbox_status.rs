//! PodSandboxStatus: the record in CRI form; an unknown id is NotFound.

use crate::api::cri::*;
use crate::sandbox::manager::{SandboxRecord, SandboxState};
use crate::server::instrument::State;
use std::collections::HashMap;
use tonic::Status;

pub(super) fn state_of(r: &SandboxRecord) -> i32 {
    match r.state {
        SandboxState::Ready => PodSandboxState::SandboxReady as i32,
        SandboxState::NotReady => PodSandboxState::SandboxNotready as i32,
    }
}

pub(super) fn metadata(r: &SandboxRecord) -> PodSandboxMetadata {
    PodSandboxMetadata {
        name: r.name.clone(),
        uid: r.uid.clone(),
        namespace: r.namespace.clone(),
        attempt: r.attempt,
    }
}

pub async fn handle(
    state: &State,
    req: PodSandboxStatusRequest,
) -> Result<PodSandboxStatusResponse, Status> {
    super::args::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let sandboxes = state.sandboxes()?;
    let id = sandboxes.resolve(&req.pod_sandbox_id).ok_or_else(|| {
        Status::not_found(format!("pod sandbox {:?} not found", req.pod_sandbox_id))
    })?;
    // Only this pod is refreshed: the kubelet asks every pod's status in
    // its relists, and a refresh of them all made each ask O(pods).
    let r = sandboxes
        .list_where(|r| r.id == id)
        .into_iter()
        .next()
        .ok_or_else(|| Status::not_found(format!("pod sandbox {id:?} not found")))?;
    let mut info = HashMap::new();
    if req.verbose {
        // The pod-level resources UpdatePodSandboxResources recorded, in
        // the OCI form.
        let linux = sandboxes.saved_config(&id).linux.unwrap_or_default();
        let oci = |r: Option<crate::api::cri::LinuxContainerResources>| {
            r.map(|r| {
                let mut v = serde_json::json!({});
                crate::oci::set_resources(&mut v, &r);
                v
            })
        };
        let v = serde_json::json!({
            "pid": r.pause_pid,
            "overhead": oci(linux.overhead),
            "resources": oci(linux.resources),
            "netNamespacePath": r.netns,
            "cgroupsPath": r.cgroups_path,
            "hostname": r.hostname,
            "record": r,
        });
        info.insert("info".to_string(), v.to_string());
    }
    Ok(PodSandboxStatusResponse {
        status: Some(status_of(&r)),
        info,
        containers_statuses: Vec::new(),
        timestamp: crate::sys::now_ns(),
    })
}

/// The CRI status of a record, as recorded.
pub(super) fn status_of(r: &SandboxRecord) -> PodSandboxStatus {
    let network = if r.state == SandboxState::Ready {
        Some(PodSandboxNetworkStatus {
            ip: r.ips.first().cloned().unwrap_or_default(),
            additional_ips: r
                .ips
                .iter()
                .skip(1)
                .map(|ip| PodIp { ip: ip.clone() })
                .collect(),
        })
    } else {
        Some(PodSandboxNetworkStatus::default())
    };
    PodSandboxStatus {
        id: r.id.clone(),
        metadata: Some(metadata(r)),
        state: state_of(r),
        created_at: r.created_at,
        network,
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(NamespaceOption {
                    network: r.network_mode,
                    pid: r.pid_mode,
                    ipc: r.ipc_mode,
                    userns_options: r.userns.as_ref().map(|u| u.to_cri()),
                    ..Default::default()
                }),
            }),
        }),
        labels: r.labels.clone().into_iter().collect(),
        annotations: r.annotations.clone().into_iter().collect(),
        runtime_handler: r.runtime_handler.clone(),
    }
}
