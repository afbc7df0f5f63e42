//! PLEG, the pod lifecycle event generator.
//!
//! Generic mode: every relist period (1 s by default) ListPodSandbox and
//! ListContainers (this node's labels only) are diffed against the last
//! relist into ContainerStarted / ContainerDied / ContainerRemoved /
//! ContainerChanged events, each naming the pod's UID, which wake the
//! sync loop for that pod.
//!
//! Evented mode: when the runtime answers GetContainerEvents, its stream
//! wakes pods at once and relisting slows to ten times the period, as a
//! safety net. A runtime that answers Unimplemented (containerd 1.6, or
//! husk while the RPC is not built) stays on generic relisting; a stream
//! that breaks falls back to it and is retried.
//!
//! Health is the time since the last successful relist (the kubelet calls
//! PLEG unhealthy after 3 minutes).

use crate::api::cri::{ContainerState, GetEventsRequest, PodSandboxState};
use crate::kubelet::kit::labels;
use crate::kubelet::kit::runtime::Cri;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
}

#[derive(Debug, Clone)]
pub struct PlegEvent {
    pub uid: String,
    pub kind: EventKind,
    /// Container or sandbox ID.
    pub id: String,
}

/// One relist: object ID → (pod UID, state), sandboxes and containers.
#[derive(Debug, Clone, Default)]
pub struct Relist {
    pub sandboxes: HashMap<String, (String, bool)>,
    pub containers: HashMap<String, (String, i32)>,
}

impl Relist {
    /// Pod UIDs present in the runtime.
    pub fn uids(&self) -> std::collections::HashSet<String> {
        self.sandboxes
            .values()
            .map(|(u, _)| u.clone())
            .chain(self.containers.values().map(|(u, _)| u.clone()))
            .collect()
    }
}

#[derive(Default)]
pub struct Health {
    last_relist: Mutex<Option<Instant>>,
    evented: AtomicBool,
    latest: Mutex<Relist>,
    /// How long relists took: the last one and the longest.
    took: Mutex<(Duration, Duration)>,
    /// Relists made, and those that took longer than their period.
    relists: AtomicU64,
    late: AtomicU64,
}

pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(180);

impl Health {
    pub fn since_last_relist(&self) -> Option<Duration> {
        self.last_relist
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed())
    }

    pub fn healthy(&self) -> bool {
        self.since_last_relist()
            .is_some_and(|d| d < UNHEALTHY_AFTER)
    }

    /// The last relist's duration and the longest so far.
    pub fn relist_took(&self) -> (Duration, Duration) {
        *self.took.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Relists made, and how many took longer than their period.
    pub fn relists(&self) -> (u64, u64) {
        (
            self.relists.load(Ordering::Relaxed),
            self.late.load(Ordering::Relaxed),
        )
    }

    /// Records a successful relist that took `d`; one longer than its
    /// `period` (the one in effect: longer while events stream) is
    /// counted and told (the next relist starts late).
    fn relisted(&self, d: Duration, period: Duration) {
        *self.last_relist.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let mut t = self.took.lock().unwrap_or_else(|e| e.into_inner());
        *t = (d, t.1.max(d));
        self.relists.fetch_add(1, Ordering::Relaxed);
        if d > period {
            self.late.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(took = ?d, ?period, "PLEG relist took longer than its period");
        }
    }

    pub fn evented(&self) -> bool {
        self.evented.load(Ordering::Relaxed)
    }

    /// The last relist (for garbage collection).
    pub fn latest(&self) -> Relist {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn relist(cri: &Cri, node: &str) -> Result<Relist, crate::kubelet::kit::runtime::CriError> {
    let sel = HashMap::from([(labels::NODE.to_string(), node.to_string())]);
    let mut r = Relist::default();
    for s in cri.list_sandboxes(sel.clone()).await? {
        let uid = s.labels.get(labels::POD_UID).cloned().unwrap_or_default();
        r.sandboxes
            .insert(s.id, (uid, s.state == PodSandboxState::SandboxReady as i32));
    }
    for c in cri.list_containers(sel).await? {
        let uid = c.labels.get(labels::POD_UID).cloned().unwrap_or_default();
        r.containers.insert(c.id, (uid, c.state));
    }
    Ok(r)
}

fn diff(old: &Relist, new: &Relist) -> Vec<PlegEvent> {
    let running = ContainerState::ContainerRunning as i32;
    let exited = ContainerState::ContainerExited as i32;
    let mut out = Vec::new();
    for (id, (uid, st)) in &new.containers {
        let kind = match old.containers.get(id) {
            Some((_, o)) if o == st => continue,
            _ if *st == running => EventKind::ContainerStarted,
            _ if *st == exited => EventKind::ContainerDied,
            _ => EventKind::ContainerChanged,
        };
        out.push(PlegEvent {
            uid: uid.clone(),
            kind,
            id: id.clone(),
        });
    }
    for (id, (uid, _)) in &old.containers {
        if !new.containers.contains_key(id) {
            out.push(PlegEvent {
                uid: uid.clone(),
                kind: EventKind::ContainerRemoved,
                id: id.clone(),
            });
        }
    }
    for (id, (uid, ready)) in &new.sandboxes {
        if old.sandboxes.get(id).map(|(_, r)| r) != Some(ready) {
            out.push(PlegEvent {
                uid: uid.clone(),
                kind: EventKind::ContainerChanged,
                id: id.clone(),
            });
        }
    }
    for (id, (uid, _)) in &old.sandboxes {
        if !new.sandboxes.contains_key(id) {
            out.push(PlegEvent {
                uid: uid.clone(),
                kind: EventKind::ContainerRemoved,
                id: id.clone(),
            });
        }
    }
    out
}

/// Runs PLEG until the receiver is dropped.
pub async fn run(
    cri: Cri,
    node: String,
    period: Duration,
    tx: mpsc::UnboundedSender<PlegEvent>,
    health: Arc<Health>,
) {
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<PlegEvent>();
    // The evented stream, with retry; `false` from the task: Unimplemented.
    let streamer = {
        let cri = cri.clone();
        let health = health.clone();
        let node = node.clone();
        tokio::spawn(async move {
            loop {
                match cri
                    .rt
                    .clone()
                    .get_container_events(GetEventsRequest {})
                    .await
                {
                    Ok(resp) => {
                        tracing::info!("runtime streams container events: evented PLEG on");
                        health.evented.store(true, Ordering::Relaxed);
                        let mut s = resp.into_inner();
                        while let Ok(Some(e)) = s.message().await {
                            let meta_uid = e
                                .pod_sandbox_status
                                .as_ref()
                                .filter(|s| s.labels.get(labels::NODE) == Some(&node))
                                .and_then(|s| s.metadata.as_ref())
                                .map(|m| m.uid.clone());
                            let uid = meta_uid.or_else(|| {
                                let l = health.latest();
                                l.containers.get(&e.container_id).map(|(u, _)| u.clone())
                            });
                            if let Some(uid) = uid {
                                let _ = ev_tx.send(PlegEvent {
                                    uid,
                                    kind: EventKind::ContainerChanged,
                                    id: e.container_id,
                                });
                            }
                        }
                        health.evented.store(false, Ordering::Relaxed);
                        tracing::warn!(
                            "container event stream ended; relisting every {:?}",
                            period
                        );
                    }
                    Err(st) if st.code() == tonic::Code::Unimplemented => {
                        tracing::info!(message = %st.message(), "runtime has no GetContainerEvents; generic PLEG relists every {:?}", period);
                        return;
                    }
                    Err(st) => {
                        tracing::debug!(error = %st, "GetContainerEvents failed; will retry");
                    }
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        })
    };
    let mut old = Relist::default();
    let mut first = true;
    loop {
        let t0 = Instant::now();
        // While events stream, a relist is only the safety net.
        let every = if health.evented() {
            period * 10
        } else {
            period
        };
        match relist(&cri, &node).await {
            Ok(new) => {
                health.relisted(t0.elapsed(), every);
                if !first {
                    for e in diff(&old, &new) {
                        tracing::debug!(pod_uid = %e.uid, id = %e.id, kind = ?e.kind, "PLEG event");
                        if tx.send(e).is_err() {
                            streamer.abort();
                            return;
                        }
                    }
                }
                first = false;
                *health.latest.lock().unwrap_or_else(|e| e.into_inner()) = new.clone();
                old = new;
            }
            Err(e) => tracing::warn!(error = %e, "PLEG relist failed"),
        }
        let wait = if health.evented() {
            period * 10
        } else {
            period
        };
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                Some(e) = ev_rx.recv() => {
                    if tx.send(e).is_err() {
                        streamer.abort();
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_s_duration_and_the_longest_are_kept() {
        let h = Health::default();
        assert!(!h.healthy(), "no relist yet");
        h.relisted(Duration::from_millis(30), Duration::from_secs(1));
        h.relisted(Duration::from_millis(1500), Duration::from_secs(1));
        h.relisted(Duration::from_millis(20), Duration::from_secs(1));
        assert_eq!(
            h.relist_took(),
            (Duration::from_millis(20), Duration::from_millis(1500))
        );
        assert_eq!(h.relists(), (3, 1), "one of three over its period");
        assert!(h.healthy());
    }

    #[test]
    fn relists_diff_into_events() {
        let running = ContainerState::ContainerRunning as i32;
        let exited = ContainerState::ContainerExited as i32;
        let mut a = Relist::default();
        a.containers.insert("c1".into(), ("u".into(), running));
        a.containers.insert("c2".into(), ("u".into(), exited));
        let mut b = Relist::default();
        b.containers.insert("c1".into(), ("u".into(), exited));
        b.containers.insert("c3".into(), ("v".into(), running));
        b.sandboxes.insert("s".into(), ("v".into(), true));
        let mut ev: Vec<(String, EventKind)> =
            diff(&a, &b).into_iter().map(|e| (e.id, e.kind)).collect();
        ev.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            ev,
            vec![
                ("c1".into(), EventKind::ContainerDied),
                ("c2".into(), EventKind::ContainerRemoved),
                ("c3".into(), EventKind::ContainerStarted),
                ("s".into(), EventKind::ContainerChanged),
            ]
        );
        assert_eq!(b.uids().len(), 2);
    }
}
