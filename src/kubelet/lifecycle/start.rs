//! Starting one container, as the kubelet's startContainer does: the
//! crash-loop back-off check (keyed by pod UID, container name and spec
//! hash, counted from the previous attempt's exit), the image by pull
//! policy, the runAsNonRoot check against the image's user, the
//! termination-message file and managed /etc/hosts, CreateContainer and
//! StartContainer, then the postStart hook (a failing hook kills the
//! container). A failure becomes the container's waiting reason.

use super::terminate;
use super::Ctx;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::recorder::human;
use crate::kubelet::kit::recorder::{NORMAL, WARNING};
use crate::kubelet::kit::runtime::{CState, RuntimePod};
use crate::kubelet::managers::handlers;
use crate::kubelet::managers::reasons::StartError;
use crate::kubelet::spec::container_config;
use crate::kubelet::spec::inputs::Inputs;
use crate::kubelet::spec::sandbox_config;
use crate::kubelet::spec::volumes;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::time::Duration;

pub struct StartCtx<'a> {
    pub pod: &'a Pod,
    pub sandbox_id: &'a str,
    pub sandbox_cfg: &'a crate::api::cri::PodSandboxConfig,
    pub pod_ips: &'a [String],
    pub volumes: &'a std::collections::HashMap<String, std::path::PathBuf>,
    pub rt: &'a RuntimePod,
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

pub async fn start_container(
    ctx: &Ctx,
    s: &StartCtx<'_>,
    c: &Container,
    init: bool,
) -> Result<(), StartError> {
    let r = start_inner(ctx, s, c, init).await;
    match &r {
        Ok(()) => ctx.reasons.clear(defaults::uid(s.pod), &c.name),
        Err(e) => {
            if e.reason == "CrashLoopBackOff" {
                ctx.recorder.container(
                    s.pod,
                    &c.name,
                    WARNING,
                    "BackOff",
                    "Back-off restarting failed container",
                );
            } else {
                tracing::warn!(pod = %defaults::full_name(s.pod), container = %c.name, reason = %e.reason, message = %e.message, "container start failed");
                if !e.reason.starts_with("Err") && !e.reason.contains("Image") {
                    ctx.recorder.container(
                        s.pod,
                        &c.name,
                        WARNING,
                        "Failed",
                        &format!("Error: {}", e.message),
                    );
                }
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
            crate::kubelet::kit::backoff::now_ns()
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
        .ensure(&ctx.objects, pod, c, s.sandbox_cfg)
        .await?;
    let image_volumes = ctx
        .images
        .ensure_volumes(&ctx.objects, pod, c, s.sandbox_cfg)
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
    let env_objects = crate::kubelet::spec::env::env_objects(&ctx.objects, pod, c)
        .await
        .map_err(config_err)?;
    let ns = defaults::namespace(pod);
    let own = ctx.objects.services(ns).await;
    let default_ns = if ns == "default" {
        own.clone()
    } else {
        ctx.objects.services("default").await
    };
    let service_env = crate::kubelet::spec::service_env::for_pod(pod, &own, &default_ns);
    let subpaths =
        crate::kubelet::spec::subpath::bind_all(&ctx.settings, defaults::uid(pod), c, s.volumes)
            .map_err(|e| config_err(e.to_string()))?;
    let inputs = Inputs {
        subpaths: &subpaths,
        service_env: &service_env,
        env_objects: &env_objects,
        restart_count,
        pod_ips: s.pod_ips,
        host_ip: ctx.settings.node_ip.as_deref().unwrap_or(""),
        volumes: s.volumes,
        image_volumes: &image_volumes,
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
    ctx.recorder.container(
        pod,
        &c.name,
        NORMAL,
        "Created",
        &format!("Created container {}", c.name),
    );
    ctx.cri.start_container(&id).await.map_err(|e| StartError {
        reason: "RunContainerError".into(),
        message: e.status.message().to_string(),
        retry_after: None,
    })?;
    ctx.recorder.container(
        pod,
        &c.name,
        NORMAL,
        "Started",
        &format!("Started container {}", c.name),
    );
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
