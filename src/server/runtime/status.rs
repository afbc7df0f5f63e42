//! Status: the RuntimeReady and NetworkReady conditions, and the features
//! husk has (recursive read-only mounts where the kernel has
//! mount_setattr(2), SupplementalGroupsPolicy and ContainerUser; user
//! namespaces where the root's filesystem and tmpfs can be idmapped), for
//! every configured runtime handler whose runtime is there.
//!
//! RuntimeReady is true once recovery is done. NetworkReady follows the CNI
//! config dir: false with reason NetworkPluginNotReady while it holds no
//! network config, as containerd reports.

use crate::api::cri::{
    RuntimeCondition, RuntimeFeatures, RuntimeHandler, RuntimeStatus, StatusRequest, StatusResponse,
};
use crate::server::instrument::State;
use std::collections::HashMap;
use std::path::Path;
use tonic::Status;

/// Whether `dir` holds a CNI network config (`.conf`, `.conflist`, `.json`).
pub fn has_cni_config(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().any(|e| {
                let p = e.path();
                p.is_file()
                    && matches!(
                        p.extension().and_then(|x| x.to_str()),
                        Some("conf" | "conflist" | "json")
                    )
            })
        })
        .unwrap_or(false)
}

/// One entry per handler a pod may name (`""`, the default, first), each
/// with what it can do: husk's own path what this kernel and root allow,
/// an OCI runtime as much of that as its `features` claims
/// (`sandbox/handlers.rs`). The kubelet looks a RuntimeClass's handler up
/// by name.
fn handlers(state: &State) -> Vec<RuntimeHandler> {
    state.handlers.current().status(
        crate::container::mounts::recursive_read_only_supported(),
        crate::idmap::Support::cached(&state.cfg.root).pods(),
    )
}

pub async fn handle(state: &State, req: StatusRequest) -> Result<StatusResponse, Status> {
    let runtime_ready = state.images().is_ok();
    let runtime = RuntimeCondition {
        r#type: "RuntimeReady".into(),
        status: runtime_ready,
        reason: if runtime_ready {
            String::new()
        } else {
            "Recovering".into()
        },
        message: if runtime_ready {
            String::new()
        } else {
            "husk is recovering its state".into()
        },
    };
    let dir = &state.cfg.cni.conf_dir;
    let net_ready = has_cni_config(dir);
    let network = RuntimeCondition {
        r#type: "NetworkReady".into(),
        status: net_ready,
        reason: if net_ready {
            String::new()
        } else {
            "NetworkPluginNotReady".into()
        },
        message: if net_ready {
            String::new()
        } else {
            format!("Network plugin returns error: cni plugin not initialized: no network config found in {}", dir.display())
        },
    };
    let mut info = HashMap::new();
    if req.verbose {
        info.insert(
            "config".to_string(),
            serde_json::to_string(&state.cfg).map_err(|e| Status::internal(e.to_string()))?,
        );
        // The NRI plugins in the chain now, as `husk check` lists them.
        let nri = match state.containers().ok().and_then(|c| c.nri()) {
            Some(n) => serde_json::json!({
                "enabled": true,
                "socket": n.socket(),
                "plugins": n.connected().await.iter().map(|p| serde_json::json!({
                    "id": p.id, "events": p.events,
                })).collect::<Vec<_>>(),
            }),
            None => serde_json::json!({"enabled": false}),
        };
        info.insert("nri".to_string(), nri.to_string());
    }
    Ok(StatusResponse {
        status: Some(RuntimeStatus {
            conditions: vec![runtime, network],
        }),
        info,
        runtime_handlers: handlers(state),
        // hostUsers: false with hostNetwork is refused (sandbox/userns.rs).
        features: Some(RuntimeFeatures {
            supplemental_groups_policy: true,
            user_namespaces_host_network: false,
        }),
    })
}
