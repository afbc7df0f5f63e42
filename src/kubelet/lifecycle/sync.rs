//! syncPod: compare a pod's spec with what the runtime has and act, as
//! the kubelet's kuberuntime SyncPod does:
//!
//! 1. compute the actions ([`compute`]): is a (new) sandbox needed, which
//!    init container runs next, which app containers start, which running
//!    containers are killed (spec hash changed, liveness or startup probe
//!    failed), and whether the whole pod is killed (nothing left to run);
//! 2. kill the pod or the containers to kill (preStop, grace period);
//! 3. create the sandbox (volumes first);
//! 4. start the next init container, one at a time, each to success;
//! 5. start the app containers (pull by policy, crash-loop back-off,
//!    config, create, start, postStart).
//!
//! Failures of one container are recorded as its waiting reason
//! (ErrImagePull, CrashLoopBackOff, CreateContainerConfigError, …) and
//! the pod is retried when the earliest back-off expires.

use super::start::{start_container, StartCtx};
use super::terminate;
use super::Ctx;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::progress::{
    next_init, should_restart, should_restart_on_failure, succeeded,
};
use crate::kubelet::kit::runtime::{CState, RuntimePod};
use crate::kubelet::managers::prober::Kind as ProbeKind;
use crate::kubelet::spec::sandbox_config;
use crate::kubelet::spec::volumes;
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

#[derive(Debug, Default, PartialEq)]
pub struct Actions {
    pub kill_pod: bool,
    pub create_sandbox: bool,
    pub attempt: u32,
    /// Index into the init containers.
    pub next_init: Option<usize>,
    /// Indexes into the app containers.
    pub to_start: Vec<usize>,
    /// (container id, name, why).
    pub to_kill: Vec<(String, String, String)>,
}

const LIVENESS_FAILED: &str = "Container failed liveness probe";
const STARTUP_FAILED: &str = "Container failed startup probe";

/// Whether the pod needs a (new) sandbox, and with which attempt.
fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32) {
    let Some(latest) = rt.sandboxes.first() else {
        return (true, 0);
    };
    let next = latest.attempt + 1;
    let ready = rt.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 || !latest.ready {
        return (true, next);
    }
    if latest.host_network != defaults::host_network(pod) {
        return (true, next);
    }
    if !defaults::host_network(pod) && latest.ip.is_empty() {
        return (true, next);
    }
    (false, latest.attempt)
}

/// The actions for one sync. `probe` answers whether a container's
/// liveness or startup probe has failed.
pub fn compute(
    pod: &Pod,
    rt: &RuntimePod,
    probe_failed: &dyn Fn(&str, ProbeKind) -> bool,
) -> Actions {
    let (create, attempt) = sandbox_changed(pod, rt);
    let mut a = Actions {
        kill_pod: create,
        create_sandbox: create,
        attempt,
        ..Default::default()
    };
    let apps = defaults::containers(pod);
    if create {
        if !should_restart_on_failure(pod) && attempt != 0 && !rt.containers.is_empty() {
            // restartPolicy Never: a pod that already ran is not rerun.
            a.create_sandbox = false;
            return a;
        }
        a.to_start = apps
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(defaults::restart_policy(pod) == "OnFailure" && succeeded(rt, &c.name))
            })
            .map(|(i, _)| i)
            .collect();
        if !defaults::init_containers(pod).is_empty() {
            a.to_start.clear();
            a.next_init = Some(0);
            return a;
        }
        if a.to_start.is_empty() {
            a.create_sandbox = false;
        }
        return a;
    }
    let (failed, next, done) = next_init(pod, rt);
    if !done {
        if failed.is_some() && !should_restart_on_failure(pod) {
            a.kill_pod = true;
        } else {
            a.next_init = next;
        }
        return a;
    }
    let mut keep = 0;
    for (i, c) in apps.iter().enumerate() {
        let Some(st) = rt.latest(&c.name).filter(|s| s.state == CState::Running) else {
            if should_restart(pod, rt, &c.name) {
                a.to_start.push(i);
            }
            continue;
        };
        let (why, restart) = if st.hash != defaults::container_hash(c) {
            ("Container spec hash changed", true)
        } else if probe_failed(&st.id, ProbeKind::Liveness) {
            (LIVENESS_FAILED, should_restart_on_failure(pod))
        } else if probe_failed(&st.id, ProbeKind::Startup) {
            (STARTUP_FAILED, should_restart_on_failure(pod))
        } else {
            keep += 1;
            continue;
        };
        if restart {
            a.to_start.push(i);
        }
        a.to_kill
            .push((st.id.clone(), c.name.clone(), why.to_string()));
    }
    if keep == 0 && a.to_start.is_empty() {
        a.kill_pod = true;
    }
    a
}

/// Runs one sync of a live (admitted, not deleted) pod; returns when to
/// sync again at the latest.
pub async fn sync_pod(ctx: &Ctx, pod: &Pod) -> Option<Duration> {
    let uid = defaults::uid(pod).to_string();
    let rt = match ctx.cri.pod(&ctx.settings.node_name, &uid).await {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(pod = %defaults::full_name(pod), error = %e, "cannot read the pod's runtime state");
            return Some(ctx.settings.error_requeue);
        }
    };
    let probes = ctx.probes.clone();
    let actions = compute(pod, &rt, &|id, kind| probes.failed(&uid, id, kind));
    if actions != Actions::default() {
        tracing::debug!(pod = %defaults::full_name(pod), ?actions, "sync");
    }
    let mut retry: Option<Duration> = None;
    let mut soonest = |d: Option<Duration>| {
        let d = d.unwrap_or(ctx.settings.error_requeue);
        retry = Some(retry.map_or(d, |r: Duration| r.min(d)));
    };
    if actions.kill_pod {
        terminate::kill_pod(
            ctx,
            Some(pod),
            &rt,
            "pod needs to be restarted or has finished",
            None,
        )
        .await;
        if !actions.create_sandbox {
            return retry;
        }
    } else {
        for (id, name, why) in &actions.to_kill {
            if let Some(c) = rt.containers.iter().find(|c| &c.id == id) {
                tracing::info!(pod = %defaults::full_name(pod), container = %name, reason = %why, "killing container");
                // A failed probe's own grace period overrides the pod's.
                let spec = defaults::containers(pod).iter().find(|s| &s.name == name);
                let probe = match why.as_str() {
                    LIVENESS_FAILED => spec.and_then(|s| s.liveness_probe.as_ref()),
                    STARTUP_FAILED => spec.and_then(|s| s.startup_probe.as_ref()),
                    _ => None,
                };
                let grace = probe.and_then(|p| p.termination_grace_period_seconds);
                terminate::kill_container(ctx, Some(pod), c, &rt, grace).await;
            }
        }
    }
    // API-backed volumes are refreshed at every sync, so an edited Secret
    // or ConfigMap reaches running containers.
    let api_vols = crate::kubelet::spec::api_volumes::setup(&ctx.objects, &ctx.settings, pod).await;
    if !actions.create_sandbox && actions.next_init.is_none() && actions.to_start.is_empty() {
        if let Err(e) = api_vols {
            tracing::warn!(pod = %defaults::full_name(pod), error = %e, "volume refresh failed");
        }
        return retry;
    }
    // The pod's cgroup before anything of it runs (the kubelet's
    // EnsureExists), so its containers are bounded together.
    if let Err(e) = ctx.cgroups.ensure_pod(&ctx.settings, pod) {
        ctx.set_pod_reason(pod, "ContainerCreating", &e.to_string());
        soonest(None);
        return retry;
    }
    // Volumes first: a pod whose volumes cannot be set up stays ContainerCreating.
    let vols = match volumes::setup(&ctx.settings, pod) {
        Ok(v) => v,
        Err(e) => {
            ctx.set_pod_reason(pod, "ContainerCreating", &e.to_string());
            soonest(None);
            return retry;
        }
    };
    let mount_key = format!("{uid}_volumes");
    let vols = match api_vols {
        Ok(more) => {
            ctx.mount_backoff.reset(&mount_key);
            vols.into_iter().chain(more).collect()
        }
        Err(e) => {
            // Often only a moment early (a token refused until the API
            // server's node authorizer has seen the pod bound here): retry
            // soon, backing off.
            ctx.recorder.pod(
                pod,
                crate::kubelet::kit::recorder::WARNING,
                "FailedMount",
                &e.to_string(),
            );
            ctx.set_pod_reason(pod, "ContainerCreating", &e.to_string());
            ctx.mount_backoff
                .next(&mount_key, crate::kubelet::kit::backoff::now_ns());
            soonest(ctx.mount_backoff.get(&mount_key));
            return retry;
        }
    };
    // The sandbox, fresh or existing.
    let (sandbox_id, sandbox_cfg, pod_ips) = if actions.create_sandbox {
        let cfg = sandbox_config::build(&ctx.settings, pod, actions.attempt);
        tracing::info!(pod = %defaults::full_name(pod), attempt = actions.attempt, "creating sandbox");
        let made = match crate::kubelet::spec::runtime_class::handler(&ctx.objects, pod).await {
            Ok(h) => ctx
                .cri
                .run_sandbox(cfg.clone(), &h)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let id = match made {
            Ok(id) => id,
            Err(e) => {
                let msg = format!("Failed to create pod sandbox: {e}");
                ctx.recorder.pod(
                    pod,
                    crate::kubelet::kit::recorder::WARNING,
                    "FailedCreatePodSandBox",
                    &msg,
                );
                ctx.set_pod_reason(pod, "ContainerCreating", &msg);
                soonest(None);
                return retry;
            }
        };
        let ips = match ctx.cri.sandbox_status(&id).await {
            Ok(st) => crate::kubelet::kit::runtime::SandboxView::from(st).ips,
            Err(_) => Vec::new(),
        };
        ctx.clear_pod_reason(pod);
        (id, cfg, ips)
    } else {
        let Some(sb) = rt.sandboxes.first() else {
            return retry;
        };
        (
            sb.id.clone(),
            sandbox_config::build(&ctx.settings, pod, sb.attempt),
            sb.ips.clone(),
        )
    };
    if actions.next_init.is_none() && actions.to_start.is_empty() {
        return retry;
    }
    // Fresh state after kills and sandbox creation.
    let rt = ctx
        .cri
        .pod(&ctx.settings.node_name, &uid)
        .await
        .unwrap_or(rt);
    let start = StartCtx {
        pod,
        sandbox_id: &sandbox_id,
        sandbox_cfg: &sandbox_cfg,
        pod_ips: &pod_ips,
        volumes: &vols,
        rt: &rt,
    };
    if let Some(i) = actions.next_init {
        let c = &defaults::init_containers(pod)[i];
        if let Err(e) = start_container(ctx, &start, c, true).await {
            soonest(e.retry_after);
        }
        return retry;
    }
    for i in &actions.to_start {
        let c = &defaults::containers(pod)[*i];
        if let Err(e) = start_container(ctx, &start, c, false).await {
            soonest(e.retry_after);
        }
    }
    retry
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kubelet::kit::runtime::{ContainerView, SandboxView};

    fn pod(yaml: &str) -> Pod {
        let mut p: Pod = serde_yaml::from_str(yaml).unwrap();
        p.metadata.uid = Some("u".into());
        defaults::apply(&mut p);
        p
    }

    fn ctr(p: &Pod, name: &str, state: CState, exit: i32, t: i64) -> ContainerView {
        let spec = defaults::containers(p)
            .iter()
            .chain(defaults::init_containers(p))
            .find(|c| c.name == name)
            .unwrap();
        ContainerView {
            id: format!("{name}-{t}"),
            name: name.into(),
            sandbox_id: "s".into(),
            state,
            created_at: t,
            started_at: t,
            finished_at: t,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: defaults::container_hash(spec),
            restart_count: 0,
            annotations: Default::default(),
            mounts: vec![],
            log_path: String::new(),
        }
    }

    fn ready_sandbox() -> SandboxView {
        SandboxView {
            id: "s".into(),
            ready: true,
            ip: "10.0.0.2".into(),
            ..Default::default()
        }
    }

    const INIT: &str = "metadata: {name: p}\nspec:\n  initContainers: [{name: i1, image: x}, {name: i2, image: x}]\n  containers: [{name: a, image: x}]\n";

    #[test]
    fn a_new_pod_gets_a_sandbox_and_its_first_init_container() {
        let p = pod(INIT);
        let a = compute(&p, &RuntimePod::default(), &|_, _| false);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.next_init, Some(0));
        assert!(a.to_start.is_empty());
    }

    #[test]
    fn init_containers_run_in_order_then_the_apps() {
        let p = pod(INIT);
        let mut rt = RuntimePod {
            sandboxes: vec![ready_sandbox()],
            ..Default::default()
        };
        rt.containers = vec![ctr(&p, "i1", CState::Running, 0, 1)];
        assert_eq!(
            compute(&p, &rt, &|_, _| false),
            Actions::default(),
            "wait for i1"
        );
        rt.containers = vec![ctr(&p, "i1", CState::Exited, 0, 1)];
        assert_eq!(compute(&p, &rt, &|_, _| false).next_init, Some(1));
        rt.containers.insert(0, ctr(&p, "i2", CState::Exited, 0, 2));
        let a = compute(&p, &rt, &|_, _| false);
        assert_eq!(a.next_init, None);
        assert_eq!(a.to_start, vec![0]);
        // A failed init container is retried, or fails the pod under Never.
        rt.containers[0] = ctr(&p, "i2", CState::Exited, 3, 2);
        assert_eq!(compute(&p, &rt, &|_, _| false).next_init, Some(1));
        let never = pod(&INIT.replace("spec:\n", "spec:\n  restartPolicy: Never\n"));
        let mut rt2 = rt.clone();
        rt2.containers = vec![
            ctr(&never, "i2", CState::Exited, 3, 2),
            ctr(&never, "i1", CState::Exited, 0, 1),
        ];
        let a = compute(&never, &rt2, &|_, _| false);
        assert!(a.kill_pod && !a.create_sandbox && a.next_init.is_none());
    }

    #[test]
    fn restart_policy_and_probes() {
        let p = pod("metadata: {name: p}\nspec:\n  restartPolicy: OnFailure\n  containers: [{name: a, image: x}, {name: b, image: x}]\n");
        let mut rt = RuntimePod {
            sandboxes: vec![ready_sandbox()],
            ..Default::default()
        };
        rt.containers = vec![
            ctr(&p, "a", CState::Exited, 0, 1),
            ctr(&p, "b", CState::Exited, 1, 1),
        ];
        let a = compute(&p, &rt, &|_, _| false);
        assert_eq!(a.to_start, vec![1], "only the failed one restarts");
        rt.containers[1] = ctr(&p, "b", CState::Running, 0, 2);
        let a = compute(&p, &rt, &|id, k| id == "b-2" && k == ProbeKind::Liveness);
        assert_eq!(a.to_kill.len(), 1);
        assert_eq!(a.to_start, vec![1]);
        // All done: the pod is killed (its sandbox stopped), nothing restarts.
        rt.containers[1] = ctr(&p, "b", CState::Exited, 0, 3);
        let a = compute(&p, &rt, &|_, _| false);
        assert!(a.kill_pod && a.to_start.is_empty());
        // A changed spec replaces the running container.
        let mut rt3 = rt.clone();
        rt3.containers = vec![ctr(&p, "a", CState::Running, 0, 1)];
        rt3.containers[0].hash = "old".into();
        let a = compute(&p, &rt3, &|_, _| false);
        assert_eq!(a.to_kill[0].2, "Container spec hash changed");
        assert!(a.to_start.contains(&0));
    }

    #[test]
    fn a_finished_never_pod_is_not_rerun() {
        let p = pod("metadata: {name: p}\nspec:\n  restartPolicy: Never\n  containers: [{name: a, image: x}]\n");
        let mut sb = ready_sandbox();
        sb.ready = false;
        let rt = RuntimePod {
            sandboxes: vec![sb],
            containers: vec![ctr(&p, "a", CState::Exited, 0, 1)],
            ..Default::default()
        };
        let a = compute(&p, &rt, &|_, _| false);
        assert!(!a.create_sandbox);
        assert!(a.to_start.is_empty());
    }
}
