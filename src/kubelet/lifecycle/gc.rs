//! Garbage collection of what the kubelet left in the runtime and on disk:
//!
//! - sandboxes and containers carrying this node's labels whose pod is not
//!   (any more) defined: killed gracefully (preStop and grace period from
//!   their annotations) and removed, with their pod directory, logs and
//!   cgroups;
//! - dead containers of live pods beyond the newest dead one per container
//!   name (the kubelet keeps one, for status and `kubectl logs --previous`),
//!   and dead sandboxes that are not the pod's newest;
//! - pod directories of pods that exist nowhere.
//!
//! It runs only once every source has delivered its first snapshot, so a
//! restarting kubelet adopts its running pods instead of collecting them.

use super::terminate;
use super::Ctx;
use crate::kubelet::kit::runtime::CState;
use crate::kubelet::managers::pleg::Relist;
use crate::kubelet::spec::volumes;
use std::collections::HashSet;

pub async fn collect(ctx: &Ctx, known: &HashSet<String>, relist: &Relist) {
    let present = relist.uids();
    for uid in present.iter().filter(|u| !known.contains(*u)) {
        let Ok(rt) = ctx.cri.pod(&ctx.settings.node_name, uid).await else {
            continue;
        };
        // The relist may be older than a removal that already happened.
        if rt.sandboxes.is_empty() && rt.containers.is_empty() {
            continue;
        }
        tracing::info!(pod_uid = %uid, sandboxes = rt.sandboxes.len(), containers = rt.containers.len(), "removing an orphaned pod");
        terminate::remove_pod(ctx, None, &rt).await;
    }
    for uid in present.iter().filter(|u| known.contains(*u)) {
        let Ok(rt) = ctx.cri.pod(&ctx.settings.node_name, uid).await else {
            continue;
        };
        // Newest first: the first dead container of a name is kept.
        let mut seen = HashSet::new();
        for c in rt.containers.iter().filter(|c| c.state == CState::Exited) {
            if !seen.insert(c.name.clone()) {
                if let Err(e) = ctx.cri.remove_container(&c.id).await {
                    tracing::warn!(container_id = %c.id, error = %e, "remove dead container failed");
                }
            }
        }
        for s in rt.sandboxes.iter().skip(1).filter(|s| !s.ready) {
            if rt
                .containers
                .iter()
                .any(|c| c.sandbox_id == s.id && c.state != CState::Exited)
            {
                continue;
            }
            // Dead containers of an old sandbox go with it.
            for c in rt.containers.iter().filter(|c| c.sandbox_id == s.id) {
                let _ = ctx.cri.remove_container(&c.id).await;
            }
            if let Err(e) = ctx.cri.remove_sandbox(&s.id).await {
                tracing::warn!(pod_sandbox_id = %s.id, error = %e, "remove dead sandbox failed");
            }
        }
    }
    for uid in volumes::pod_dirs(&ctx.settings) {
        if !known.contains(&uid) && !present.contains(&uid) {
            if let Err(e) = volumes::remove_pod_dir(&ctx.settings, &uid) {
                tracing::warn!(pod_uid = %uid, error = %e, "remove orphaned pod directory failed");
            }
        }
    }
}
