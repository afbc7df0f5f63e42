//! Stopping containers and pods the kubelet's way: the preStop hook runs
//! first (inside the grace period), the rest of the grace period (at least
//! 2 s) is StopContainer's timeout, containers stop in parallel, then the
//! sandboxes stop. When the pod's spec is gone (a restarted kubelet
//! cleaning up an orphan), the grace period and preStop hook come from
//! the annotations the kubelet put on each container.

use super::Ctx;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::kit::runtime::{CState, ContainerView, RuntimePod};
use crate::kubelet::managers::handlers;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use std::time::{Duration, Instant};

const MIN_GRACE: i64 = 2;

/// Stops one container: preStop, then StopContainer with what is left of
/// the grace period. `grace_override` is a probe's own grace period.
pub async fn kill_container(
    ctx: &Ctx,
    pod: Option<&Pod>,
    c: &ContainerView,
    rt: &RuntimePod,
    grace_override: Option<i64>,
) {
    let spec: Option<&Container> = pod.and_then(|p| {
        defaults::containers(p)
            .iter()
            .chain(defaults::init_containers(p))
            .find(|x| x.name == c.name)
    });
    let mut grace = grace_override.unwrap_or_else(|| match pod {
        Some(p) => defaults::grace_period(p),
        None => c
            .annotations
            .get(labels::POD_TERMINATION_GRACE_PERIOD)
            .and_then(|g| g.parse().ok())
            .unwrap_or(defaults::DEFAULT_GRACE_PERIOD),
    });
    let pre_stop: Option<LifecycleHandler> = match spec {
        Some(s) => s.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()),
        None => c
            .annotations
            .get(labels::PRE_STOP_HANDLER)
            .and_then(|j| serde_json::from_str(j).ok()),
    };
    if let (Some(h), CState::Running) = (pre_stop, c.state) {
        let started = Instant::now();
        let ip = rt
            .sandboxes
            .iter()
            .find(|s| s.id == c.sandbox_id)
            .map(|s| s.ip.clone())
            .filter(|ip| !ip.is_empty())
            .unwrap_or_else(|| "127.0.0.1".into());
        let fallback = Container {
            name: c.name.clone(),
            ports: c
                .annotations
                .get(labels::CONTAINER_PORTS)
                .and_then(|j| serde_json::from_str(j).ok()),
            ..Default::default()
        };
        let target = spec.unwrap_or(&fallback);
        tracing::info!(container_id = %c.id, container = %c.name, "running preStop hook");
        let timeout = Duration::from_secs(grace.max(0) as u64);
        if let handlers::Outcome::Failure(m) =
            handlers::lifecycle(&ctx.cri, &h, &c.id, &ip, target, timeout).await
        {
            tracing::warn!(container_id = %c.id, container = %c.name, error = %m, "preStop hook failed");
        }
        grace -= started.elapsed().as_secs() as i64;
    }
    let grace = grace.max(MIN_GRACE);
    tracing::info!(container_id = %c.id, container = %c.name, grace, "stopping container");
    if let Some(p) = pod {
        ctx.recorder.container(
            p,
            &c.name,
            crate::kubelet::kit::recorder::NORMAL,
            "Killing",
            &format!("Stopping container {}", c.name),
        );
    }
    if let Err(e) = ctx.cri.stop_container(&c.id, grace).await {
        tracing::warn!(container_id = %c.id, error = %e, "stop container failed");
    }
}

/// Cuts a termination in progress short: what still runs of the pod is
/// stopped within `grace` seconds (at least 2).
pub async fn shorten(ctx: std::sync::Arc<Ctx>, uid: String, grace: i64) {
    let Ok(rt) = ctx.cri.pod(&ctx.settings.node_name, &uid).await else {
        return;
    };
    let grace = grace.max(MIN_GRACE);
    futures::future::join_all(rt.running().map(|c| {
        let ctx = ctx.clone();
        async move {
            if let Err(e) = ctx.cri.stop_container(&c.id, grace).await {
                tracing::warn!(container_id = %c.id, error = %e, "stop container failed");
            }
        }
    }))
    .await;
}

/// Stops every running container (in parallel, with `grace` instead of
/// the pod's grace period when given), then every ready sandbox.
pub async fn kill_pod(
    ctx: &Ctx,
    pod: Option<&Pod>,
    rt: &RuntimePod,
    why: &str,
    grace: Option<i64>,
) {
    let running: Vec<&ContainerView> = rt
        .containers
        .iter()
        .filter(|c| matches!(c.state, CState::Running | CState::Created | CState::Unknown))
        .collect();
    if !running.is_empty() || rt.sandboxes.iter().any(|s| s.ready) {
        tracing::info!(pod_uid = %rt.uid, reason = why, "killing pod");
    }
    futures::future::join_all(
        running
            .into_iter()
            .map(|c| kill_container(ctx, pod, c, rt, grace)),
    )
    .await;
    for s in rt.sandboxes.iter().filter(|s| s.ready) {
        if let Err(e) = ctx.cri.stop_sandbox(&s.id).await {
            tracing::warn!(pod_sandbox_id = %s.id, error = %e, "stop sandbox failed");
        }
    }
}

/// Kills the pod, then removes its containers and sandboxes from the
/// runtime, and its directories, logs and cgroups from the node.
pub async fn remove_pod(ctx: &Ctx, pod: Option<&Pod>, rt: &RuntimePod) -> bool {
    kill_pod(ctx, pod, rt, "pod deleted", None).await;
    let mut clean = true;
    for c in &rt.containers {
        if let Err(e) = ctx.cri.remove_container(&c.id).await {
            tracing::warn!(container_id = %c.id, error = %e, "remove container failed");
            clean = false;
        }
    }
    for s in &rt.sandboxes {
        if let Err(e) = ctx.cri.stop_sandbox(&s.id).await {
            tracing::warn!(pod_sandbox_id = %s.id, error = %e, "stop sandbox failed");
        }
        if let Err(e) = ctx.cri.remove_sandbox(&s.id).await {
            tracing::warn!(pod_sandbox_id = %s.id, error = %e, "remove sandbox failed");
            clean = false;
        }
    }
    if let Err(e) = crate::kubelet::spec::volumes::remove_pod_dir(&ctx.settings, &rt.uid) {
        tracing::warn!(pod_uid = %rt.uid, error = %e, "remove pod directory failed");
        clean = false;
    }
    // Logs and the pod cgroups, named from the spec or the sandbox labels.
    let (ns, name) = match pod {
        Some(p) => (
            defaults::namespace(p).to_string(),
            defaults::name(p).to_string(),
        ),
        None => rt
            .sandboxes
            .first()
            .map(|s| {
                (
                    s.labels
                        .get(labels::POD_NAMESPACE)
                        .cloned()
                        .unwrap_or_default(),
                    s.labels.get(labels::POD_NAME).cloned().unwrap_or_default(),
                )
            })
            .unwrap_or_default(),
    };
    if !name.is_empty() {
        let dir = ctx
            .settings
            .pod_log_root
            .join(format!("{ns}_{name}_{}", rt.uid));
        let _ = std::fs::remove_dir_all(dir);
    }
    ctx.cgroups.remove_pod(&rt.uid);
    clean
}
