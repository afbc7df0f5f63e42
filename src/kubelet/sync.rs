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

use super::container_config::{self, Inputs};
use super::prober::Kind as ProbeKind;
use super::runtime::{CState, ContainerView, RuntimePod};
use super::{defaults, handlers, sandbox_config, terminate, volumes, Ctx};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::time::Duration;

/// Why a container could not be started (its waiting reason).
#[derive(Debug, Clone, PartialEq)]
pub struct StartError {
    pub reason: String,
    pub message: String,
    /// When to try again (None: the usual error requeue).
    pub retry_after: Option<Duration>,
}

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

fn should_restart_on_failure(pod: &Pod) -> bool {
    defaults::restart_policy(pod) != "Never"
}

fn succeeded(rt: &RuntimePod, name: &str) -> bool {
    rt.latest(name)
        .is_some_and(|c| c.state == CState::Exited && c.exit_code == 0)
}

/// Whether a stopped container is started again (the kubelet's
/// ShouldContainerBeRestarted).
pub fn should_restart(pod: &Pod, rt: &RuntimePod, name: &str) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(c) = rt.latest(name) else {
        return true;
    };
    match c.state {
        CState::Running => false,
        CState::Created | CState::Unknown => true,
        CState::Exited => match defaults::restart_policy(pod) {
            "Never" => false,
            "OnFailure" => c.exit_code != 0,
            _ => true,
        },
    }
}

fn init_failed(c: &ContainerView) -> bool {
    match c.state {
        CState::Exited => c.exit_code != 0,
        CState::Unknown => true,
        _ => false,
    }
}

/// (last failed init container, next one to run, all done).
pub fn next_init(pod: &Pod, rt: &RuntimePod) -> (Option<usize>, Option<usize>, bool) {
    let inits = defaults::init_containers(pod);
    if inits.is_empty() {
        return (None, None, true);
    }
    // Once an app container exists, initialization is over.
    if defaults::containers(pod)
        .iter()
        .any(|c| rt.latest(&c.name).is_some())
    {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if rt.latest(&c.name).is_some_and(init_failed) {
            return (Some(i), Some(i), false);
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(st) = rt.latest(&c.name) else {
            continue;
        };
        match st.state {
            CState::Running => return (None, None, false),
            CState::Exited if i == inits.len() - 1 => return (None, None, true),
            CState::Exited => return (None, Some(i + 1), false),
            _ => return (None, Some(i), false),
        }
    }
    (None, Some(0), false)
}

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
            (
                "Container failed liveness probe",
                should_restart_on_failure(pod),
            )
        } else if probe_failed(&st.id, ProbeKind::Startup) {
            (
                "Container failed startup probe",
                should_restart_on_failure(pod),
            )
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
        )
        .await;
        if !actions.create_sandbox {
            return retry;
        }
    } else {
        for (id, name, why) in &actions.to_kill {
            if let Some(c) = rt.containers.iter().find(|c| &c.id == id) {
                tracing::info!(pod = %defaults::full_name(pod), container = %name, reason = %why, "killing container");
                terminate::kill_container(ctx, Some(pod), c, &rt, None).await;
            }
        }
    }
    // The sandbox, fresh or existing.
    let (sandbox_id, sandbox_cfg, pod_ips) = if actions.create_sandbox {
        let vols = match volumes::setup(&ctx.settings, pod) {
            Ok(v) => v,
            Err(e) => {
                ctx.set_pod_reason(pod, "ContainerCreating", &e.to_string());
                soonest(None);
                return retry;
            }
        };
        drop(vols);
        let cfg = sandbox_config::build(&ctx.settings, pod, actions.attempt);
        tracing::info!(pod = %defaults::full_name(pod), attempt = actions.attempt, "creating sandbox");
        let id = match ctx.cri.run_sandbox(cfg.clone()).await {
            Ok(id) => id,
            Err(e) => {
                ctx.set_pod_reason(
                    pod,
                    "ContainerCreating",
                    &format!("Failed to create pod sandbox: {e}"),
                );
                soonest(None);
                return retry;
            }
        };
        let ips = match ctx.cri.sandbox_status(&id).await {
            Ok(st) => super::runtime::SandboxView::from(st).ips,
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
    let vols = match volumes::setup(&ctx.settings, pod) {
        Ok(v) => v,
        Err(e) => {
            ctx.set_pod_reason(pod, "ContainerCreating", &e.to_string());
            soonest(None);
            return retry;
        }
    };
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

struct StartCtx<'a> {
    pod: &'a Pod,
    sandbox_id: &'a str,
    sandbox_cfg: &'a crate::api::cri::PodSandboxConfig,
    pod_ips: &'a [String],
    volumes: &'a std::collections::HashMap<String, std::path::PathBuf>,
    rt: &'a RuntimePod,
}

/// The crash-loop back-off key of a container (pod UID first, so a
/// removed pod's keys can be dropped by prefix).
pub fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}",
        defaults::uid(pod),
        c.name,
        defaults::container_hash(c)
    )
}

async fn start_container(
    ctx: &Ctx,
    s: &StartCtx<'_>,
    c: &Container,
    init: bool,
) -> Result<(), StartError> {
    let r = start_inner(ctx, s, c, init).await;
    match &r {
        Ok(()) => ctx.reasons.clear(defaults::uid(s.pod), &c.name),
        Err(e) => {
            if e.reason != "CrashLoopBackOff" {
                tracing::warn!(pod = %defaults::full_name(s.pod), container = %c.name, reason = %e.reason, message = %e.message, "container start failed");
            }
            ctx.reasons
                .set(defaults::uid(s.pod), &c.name, &e.reason, &e.message);
        }
    }
    r
}

async fn start_inner(
    ctx: &Ctx,
    s: &StartCtx<'_>,
    c: &Container,
    init: bool,
) -> Result<(), StartError> {
    let pod = s.pod;
    let latest = s.rt.latest(&c.name);
    if let Some(prev) = latest.filter(|p| p.state == CState::Exited) {
        let key = backoff_key(pod, c);
        let finished = if prev.finished_at > 0 {
            prev.finished_at
        } else {
            super::backoff::now_ns()
        };
        if let Some(wait) = ctx.crash_backoff.remaining_since(&key, finished) {
            let b = ctx.crash_backoff.get(&key).unwrap_or_default();
            return Err(StartError {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {} restarting failed container={} pod={}_{}({})",
                    human(b),
                    c.name,
                    defaults::name(pod),
                    defaults::namespace(pod),
                    defaults::uid(pod)
                ),
                retry_after: Some(wait),
            });
        }
        ctx.crash_backoff.next(&key, finished);
    }
    let img = ctx
        .images
        .ensure(&ctx.cri, defaults::uid(pod), c, s.sandbox_cfg)
        .await?;
    let config_err = |message: String| StartError {
        reason: "CreateContainerConfigError".into(),
        message,
        retry_after: None,
    };
    // runAsNonRoot, checked against the image's user as the kubelet does.
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root {
        let uid = sc
            .and_then(|s| s.run_as_user)
            .or(psc.and_then(|s| s.run_as_user))
            .or(img.uid);
        match uid {
            Some(0) => return Err(config_err("container has runAsNonRoot and image will run as root".into())),
            None if !img.username.is_empty() => {
                return Err(config_err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root",
                    img.username
                )))
            }
            None => return Err(config_err("container has runAsNonRoot and image will run as root".into())),
            _ => {}
        }
    }
    let restart_count = latest.map(|l| l.restart_count + 1).unwrap_or(0);
    let term = if c
        .termination_message_path
        .as_deref()
        .is_some_and(|p| !p.is_empty())
    {
        Some(
            volumes::termination_file(&ctx.settings, defaults::uid(pod), &c.name)
                .map_err(|e| config_err(e.to_string()))?,
        )
    } else {
        None
    };
    let (hostname, domain) = sandbox_config::hostname_and_domain(&ctx.settings, pod);
    let hosts = if !s.pod_ips.is_empty() || defaults::host_network(pod) {
        Some(
            volumes::etc_hosts(&ctx.settings, pod, s.pod_ips, &hostname, &domain)
                .map_err(|e| config_err(e.to_string()))?,
        )
    } else {
        None
    };
    let inputs = Inputs {
        restart_count,
        pod_ips: s.pod_ips,
        host_ip: "",
        volumes: s.volumes,
        termination_file: term,
        etc_hosts: hosts,
        image_ref: &img.image_ref,
    };
    let cfg = container_config::build(&ctx.settings, pod, c, init, &inputs);
    // The container's log directory must exist for runtimes that do not create it.
    let _ =
        std::fs::create_dir_all(std::path::Path::new(&s.sandbox_cfg.log_directory).join(&c.name));
    let id = ctx
        .cri
        .create_container(s.sandbox_id, cfg, s.sandbox_cfg.clone())
        .await
        .map_err(|e| StartError {
            reason: "CreateContainerError".into(),
            message: e.status.message().to_string(),
            retry_after: None,
        })?;
    ctx.cri.start_container(&id).await.map_err(|e| StartError {
        reason: "RunContainerError".into(),
        message: e.status.message().to_string(),
        retry_after: None,
    })?;
    tracing::info!(pod = %defaults::full_name(pod), container = %c.name, container_id = %id, restart_count, "started container");
    if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        let ip = s
            .pod_ips
            .first()
            .cloned()
            .unwrap_or_else(|| "127.0.0.1".into());
        let grace = Duration::from_secs(defaults::grace_period(pod).max(2) as u64);
        if let handlers::Outcome::Failure(msg) =
            handlers::lifecycle(&ctx.cri, h, &id, &ip, c, grace).await
        {
            if let Ok(rt) = ctx
                .cri
                .pod(&ctx.settings.node_name, defaults::uid(pod))
                .await
            {
                if let Some(cv) = rt.containers.iter().find(|x| x.id == id) {
                    terminate::kill_container(ctx, Some(pod), cv, &rt, None).await;
                }
            }
            return Err(StartError {
                reason: "PostStartHookError".into(),
                message: msg,
                retry_after: None,
            });
        }
    }
    Ok(())
}

/// "10s", "2m40s", "5m0s", as Go prints durations.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else if d.subsec_millis() > 0 && s < 10 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kubelet::runtime::SandboxView;

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

    #[test]
    fn durations_print_like_go() {
        assert_eq!(human(Duration::from_secs(10)), "10s");
        assert_eq!(human(Duration::from_secs(160)), "2m40s");
        assert_eq!(human(Duration::from_secs(300)), "5m0s");
    }
}
