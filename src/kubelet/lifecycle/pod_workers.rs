//! Pod workers: one task per pod, so a pod's syncs run one at a time (in
//! order) while different pods sync in parallel. A worker keeps only the
//! newest pending work (updates coalesce, as in the kubelet); a deleted
//! pod's worker terminates it and exits. Work for a pod that is still
//! terminating waits until the termination is done, and so does a new pod
//! with the name of a terminating one (an edited static pod): as in the
//! kubelet, two pods of one name never run at once.
//!
//! A worker's sync is: admission result → (rejected) Failed status, or
//! syncPod → probe workers → status; the loop is told when to come back.

use super::sync;
use super::terminate;
use super::Ctx;
use crate::kubelet::kit::defaults;
use crate::kubelet::managers::status;
use crate::kubelet::pods::admission::Rejection;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[derive(Clone)]
pub enum Work {
    Sync(Arc<Pod>, Option<Rejection>),
    Terminate(Arc<Pod>),
}

/// A worker's report to the loop.
pub struct Done {
    pub uid: String,
    /// Sync again by then (None: at the periodic resync).
    pub retry_after: Option<Duration>,
    pub terminated: bool,
}

struct Handle {
    tx: watch::Sender<Option<Work>>,
    terminating: bool,
    /// Work that arrived while terminating.
    pending: Option<Work>,
}

pub struct PodWorkers {
    ctx: Arc<Ctx>,
    workers: HashMap<String, Handle>,
    done: mpsc::UnboundedSender<Done>,
    /// Full name → UID of the pod terminating under that name.
    terminating_names: HashMap<String, String>,
    /// Full name → (UID, work) of a pod waiting for that name.
    waiting_for_name: HashMap<String, (String, Work)>,
}

fn pod_of(w: &Work) -> &Pod {
    match w {
        Work::Sync(p, _) | Work::Terminate(p) => p,
    }
}

impl PodWorkers {
    pub fn new(ctx: Arc<Ctx>, done: mpsc::UnboundedSender<Done>) -> PodWorkers {
        PodWorkers {
            ctx,
            workers: HashMap::new(),
            done,
            terminating_names: HashMap::new(),
            waiting_for_name: HashMap::new(),
        }
    }

    /// UIDs with a live worker.
    pub fn uids(&self) -> impl Iterator<Item = &String> {
        self.workers.keys()
    }

    pub fn dispatch(&mut self, uid: &str, work: Work) {
        let name = defaults::full_name(pod_of(&work));
        match &work {
            Work::Terminate(_) => {
                self.terminating_names.insert(name.clone(), uid.to_string());
                // A pod that never started needs no termination wait.
                if self
                    .waiting_for_name
                    .get(&name)
                    .is_some_and(|(u, _)| u == uid)
                {
                    self.waiting_for_name.remove(&name);
                }
            }
            Work::Sync(..) => {
                if self.terminating_names.get(&name).is_some_and(|u| u != uid) {
                    self.waiting_for_name.insert(name, (uid.to_string(), work));
                    return;
                }
            }
        }
        if let Some(h) = self.workers.get_mut(uid) {
            if h.terminating {
                h.pending = Some(work);
                return;
            }
            if matches!(work, Work::Terminate(_)) {
                h.terminating = true;
            }
            let _ = h.tx.send(Some(work));
            return;
        }
        let terminating = matches!(work, Work::Terminate(_));
        let (tx, rx) = watch::channel(Some(work));
        tokio::spawn(run(
            self.ctx.clone(),
            uid.to_string(),
            rx,
            self.done.clone(),
        ));
        self.workers.insert(
            uid.to_string(),
            Handle {
                tx,
                terminating,
                pending: None,
            },
        );
    }

    /// A worker finished its termination: forget it, and start what waited
    /// (work for the same UID, or a new pod of the same name).
    pub fn terminated(&mut self, uid: &str) -> Vec<(String, Work)> {
        let mut next = Vec::new();
        if let Some(w) = self.workers.remove(uid).and_then(|h| h.pending) {
            next.push((uid.to_string(), w));
        }
        let names: Vec<String> = self
            .terminating_names
            .iter()
            .filter(|(_, u)| *u == uid)
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            self.terminating_names.remove(&n);
            if let Some(w) = self.waiting_for_name.remove(&n) {
                next.push(w);
            }
        }
        next
    }

    pub fn is_terminating(&self, uid: &str) -> bool {
        self.workers.get(uid).is_some_and(|h| h.terminating)
    }
}

async fn run(
    ctx: Arc<Ctx>,
    uid: String,
    mut rx: watch::Receiver<Option<Work>>,
    done: mpsc::UnboundedSender<Done>,
) {
    loop {
        let work = rx.borrow_and_update().clone();
        match work {
            Some(Work::Sync(pod, rejection)) => {
                let retry_after = sync_once(&ctx, &pod, rejection.as_ref()).await;
                let _ = done.send(Done {
                    uid: uid.clone(),
                    retry_after,
                    terminated: false,
                });
            }
            Some(Work::Terminate(pod)) => {
                terminate_pod(&ctx, &pod).await;
                let _ = done.send(Done {
                    uid: uid.clone(),
                    retry_after: None,
                    terminated: true,
                });
                return;
            }
            None => {}
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn sync_once(ctx: &Ctx, pod: &Pod, rejection: Option<&Rejection>) -> Option<Duration> {
    let uid = defaults::uid(pod);
    let prev = ctx.status.get(uid);
    if let Some(r) = rejection {
        // Nothing runs for a rejected pod (an update may have made it invalid).
        if let Ok(rt) = ctx.cri.pod(&ctx.settings.node_name, uid).await {
            if !rt.sandboxes.is_empty() || !rt.containers.is_empty() {
                ctx.probes.remove_pod(uid);
                terminate::remove_pod(ctx, Some(pod), &rt).await;
            }
        }
        if prev.as_ref().and_then(|p| p.reason.as_ref()) != Some(&r.reason) {
            tracing::warn!(pod = %defaults::full_name(pod), reason = %r.reason, message = %r.message, "pod rejected");
            ctx.recorder.pod(
                pod,
                crate::kubelet::kit::recorder::WARNING,
                &r.reason,
                &r.message,
            );
        }
        ctx.status.set(
            pod,
            status::rejected(pod, &r.reason, &r.message, prev.as_ref()),
        );
        return None;
    }
    if let Some(e) = ctx.eviction.evicted(uid) {
        // Evicted: stopped with the eviction's grace period, and Failed.
        let why = Some(("Evicted", e.message.as_str()));
        return finish(ctx, pod, prev.as_ref(), why, Some(e.grace)).await;
    }
    if prev.is_none() {
        // A new pod shows as Pending (ContainerCreating) while its first
        // sync creates the sandbox, pulls and starts.
        let empty = crate::kubelet::kit::runtime::RuntimePod::default();
        ctx.status.set(
            pod,
            status::generate(&ctx.status_inputs(), pod, &empty, None),
        );
    }
    let prev = ctx.status.get(uid);
    let terminal = matches!(
        prev.as_ref().and_then(|p| p.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    );
    // activeDeadlineSeconds, counted from the pod's start on this node.
    let mut deadline_left = None;
    if let (Some(d), Some(start)) = (
        pod.spec.as_ref().and_then(|s| s.active_deadline_seconds),
        prev.as_ref().and_then(|p| p.start_time.as_ref()),
    ) {
        let ran = defaults::now().0.as_second() - start.0.as_second();
        if ran >= d && !terminal {
            tracing::info!(pod = %defaults::full_name(pod), deadline = d, "pod exceeded its active deadline");
            return finish(
                ctx,
                pod,
                prev.as_ref(),
                Some((
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )),
                None,
            )
            .await;
        }
        deadline_left = Some(Duration::from_secs((d - ran).max(1) as u64));
    }
    if terminal {
        // A finished pod is not run again; whatever still runs is stopped.
        return finish(ctx, pod, prev.as_ref(), None, None).await;
    }
    let retry = sync::sync_pod(ctx, pod).await;
    let retry = match (retry, deadline_left) {
        (Some(r), Some(d)) => Some(r.min(d)),
        (r, d) => r.or(d),
    };
    match ctx.cri.pod(&ctx.settings.node_name, uid).await {
        Ok(rt) => {
            ctx.probes.update(pod, &rt);
            ctx.status.set(
                pod,
                status::generate(&ctx.status_inputs(), pod, &rt, prev.as_ref()),
            );
        }
        Err(e) => {
            tracing::warn!(pod = %defaults::full_name(pod), error = %e, "cannot read the pod's runtime state")
        }
    }
    retry
}

/// Stops a pod that is done (terminal, or failed by `why`), keeping its
/// status Failed/Succeeded with the reason.
async fn finish(
    ctx: &Ctx,
    pod: &Pod,
    prev: Option<&k8s_openapi::api::core::v1::PodStatus>,
    why: Option<(&str, &str)>,
    grace: Option<i64>,
) -> Option<Duration> {
    let uid = defaults::uid(pod);
    let Ok(rt) = ctx.cri.pod(&ctx.settings.node_name, uid).await else {
        return Some(ctx.settings.error_requeue);
    };
    if rt.running().next().is_some() || rt.sandboxes.iter().any(|s| s.ready) {
        ctx.probes.remove_pod(uid);
        terminate::kill_pod(
            ctx,
            Some(pod),
            &rt,
            why.map(|w| w.0).unwrap_or("pod has finished"),
            grace,
        )
        .await;
    }
    let rt = ctx
        .cri
        .pod(&ctx.settings.node_name, uid)
        .await
        .unwrap_or(rt);
    let mut st = status::generate(&ctx.status_inputs(), pod, &rt, prev);
    match why {
        Some((reason, message)) => {
            st.phase = Some("Failed".into());
            st.reason = Some(reason.into());
            st.message = Some(message.into());
        }
        None => {
            st.reason = prev.and_then(|p| p.reason.clone());
            st.message = prev.and_then(|p| p.message.clone());
        }
    }
    ctx.status.set(pod, st);
    None
}

async fn terminate_pod(ctx: &Ctx, pod: &Pod) {
    let uid = defaults::uid(pod).to_string();
    let mut deleting = pod.clone();
    deleting.metadata.deletion_timestamp = Some(defaults::now());
    if let Some(st) = ctx.status.get(&uid) {
        ctx.status.set(&deleting, st);
    }
    ctx.probes.remove_pod(&uid);
    for attempt in 0..3 {
        match ctx.cri.pod(&ctx.settings.node_name, &uid).await {
            Ok(rt) => {
                if terminate::remove_pod(ctx, Some(&deleting), &rt).await {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(pod_uid = %uid, error = %e, attempt, "cannot read a deleted pod's runtime state")
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    ctx.crash_backoff.gc(Some(&format!("{uid}_")));
    ctx.mount_backoff.gc(Some(&format!("{uid}_")));
    ctx.images.forget_pod(&uid);
    ctx.eviction.forget(&uid);
    ctx.objects.forget_pod(&uid);
    ctx.reasons.remove_pod(&uid);
    ctx.status.remove(&uid, &deleting);
    tracing::info!(pod = %defaults::full_name(pod), "pod removed");
}
