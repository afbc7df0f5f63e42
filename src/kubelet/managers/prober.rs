//! Probes: one worker task per (pod, container, probe kind) while the
//! container runs, as the kubelet's prober manager keeps them.
//!
//! - A worker waits `initialDelaySeconds` from the container's start, then
//!   probes every `periodSeconds` with `timeoutSeconds`; a result changes
//!   after `successThreshold` successes or `failureThreshold` failures in a
//!   row, and every change wakes the sync loop for the pod.
//! - Initial results: readiness Failure (not ready until a probe passes),
//!   liveness Success, startup Unknown. Liveness and readiness do not run
//!   until the startup probe (if any) has succeeded; startup stops probing
//!   once it has.
//! - A liveness or startup Failure stops its worker: the sync loop kills
//!   the container, and its successor gets fresh workers (results are
//!   keyed by container ID).

use super::handlers::{self, Outcome};
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::recorder::Recorder;
use crate::kubelet::kit::runtime::{CState, Cri, RuntimePod};
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

type ResultKey = (String, String, Kind);
type WorkerKey = (String, String, Kind);

struct Worker {
    container_id: String,
    task: tokio::task::JoinHandle<()>,
}

struct Inner {
    cri: Cri,
    results: Mutex<HashMap<ResultKey, ProbeResult>>,
    workers: Mutex<HashMap<WorkerKey, Worker>>,
    /// The last failure message per result, for status and logs.
    messages: Mutex<HashMap<ResultKey, String>>,
    changed: mpsc::UnboundedSender<String>,
    recorder: Recorder,
}

#[derive(Clone)]
pub struct ProbeManager(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ProbeManager {
    /// `changed` receives the UID of a pod whose probe results changed.
    pub fn new(
        cri: Cri,
        changed: mpsc::UnboundedSender<String>,
        recorder: Recorder,
    ) -> ProbeManager {
        ProbeManager(Arc::new(Inner {
            cri,
            results: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            messages: Mutex::new(HashMap::new()),
            changed,
            recorder,
        }))
    }

    fn result(&self, uid: &str, id: &str, kind: Kind) -> Option<ProbeResult> {
        lock(&self.0.results)
            .get(&(uid.to_string(), id.to_string(), kind))
            .copied()
    }

    /// A liveness or startup probe has failed for this container.
    pub fn failed(&self, uid: &str, id: &str, kind: Kind) -> bool {
        self.result(uid, id, kind) == Some(ProbeResult::Failure)
    }

    /// Whether the startup probe passed (true without one).
    pub fn started(&self, uid: &str, id: &str, c: &Container) -> bool {
        c.startup_probe.is_none()
            || self.result(uid, id, Kind::Startup) == Some(ProbeResult::Success)
    }

    /// Readiness of a running container (true without a readiness probe
    /// once started).
    pub fn ready(&self, uid: &str, id: &str, c: &Container) -> bool {
        if !self.started(uid, id, c) {
            return false;
        }
        c.readiness_probe.is_none()
            || self.result(uid, id, Kind::Readiness) == Some(ProbeResult::Success)
    }

    /// Starts workers for running containers with probes, stops workers
    /// whose container is no longer the running one.
    pub fn update(&self, pod: &Pod, rt: &RuntimePod) {
        let uid = defaults::uid(pod).to_string();
        let ip = match rt.ready_sandbox() {
            Some(s) if !s.ip.is_empty() => s.ip.clone(),
            _ => "127.0.0.1".to_string(),
        };
        let mut workers = lock(&self.0.workers);
        let mut wanted: HashMap<WorkerKey, String> = HashMap::new();
        for c in defaults::containers(pod) {
            let Some(run) = rt.latest(&c.name).filter(|x| x.state == CState::Running) else {
                continue;
            };
            for (kind, probe) in [
                (Kind::Liveness, &c.liveness_probe),
                (Kind::Readiness, &c.readiness_probe),
                (Kind::Startup, &c.startup_probe),
            ] {
                let Some(probe) = probe else { continue };
                let key = (uid.clone(), c.name.clone(), kind);
                wanted.insert(key.clone(), run.id.clone());
                if workers.get(&key).is_some_and(|w| w.container_id == run.id) {
                    continue;
                }
                if let Some(old) = workers.remove(&key) {
                    old.task.abort();
                }
                let rkey = (uid.clone(), run.id.clone(), kind);
                let initial = match kind {
                    Kind::Readiness => ProbeResult::Failure,
                    Kind::Liveness => ProbeResult::Success,
                    Kind::Startup => ProbeResult::Unknown,
                };
                lock(&self.0.results).entry(rkey.clone()).or_insert(initial);
                let job = Job {
                    pod: Pod {
                        metadata: pod.metadata.clone(),
                        spec: None,
                        status: None,
                    },
                    mgr: self.clone(),
                    key: rkey,
                    container: c.clone(),
                    probe: probe.clone(),
                    ip: ip.clone(),
                    started_at_ns: run.started_at,
                };
                workers.insert(
                    key,
                    Worker {
                        container_id: run.id.clone(),
                        task: tokio::spawn(job.run()),
                    },
                );
            }
        }
        workers.retain(|k, w| {
            let keep = k.0 != uid || wanted.get(k) == Some(&w.container_id);
            if !keep {
                w.task.abort();
            }
            keep
        });
        // Results of containers that are gone.
        let live: Vec<&str> = rt.containers.iter().map(|c| c.id.as_str()).collect();
        lock(&self.0.results).retain(|k, _| k.0 != uid || live.contains(&k.1.as_str()));
    }

    /// Stops a pod's workers and forgets its results.
    pub fn remove_pod(&self, uid: &str) {
        lock(&self.0.workers).retain(|k, w| {
            if k.0 == uid {
                w.task.abort();
            }
            k.0 != uid
        });
        lock(&self.0.results).retain(|k, _| k.0 != uid);
        lock(&self.0.messages).retain(|k, _| k.0 != uid);
    }

    /// The last probe failure message of a container, if any.
    pub fn message(&self, uid: &str, id: &str, kind: Kind) -> Option<String> {
        lock(&self.0.messages)
            .get(&(uid.to_string(), id.to_string(), kind))
            .cloned()
    }

    fn set(&self, key: &ResultKey, r: ProbeResult) {
        let prev = lock(&self.0.results).insert(key.clone(), r);
        if prev != Some(r) {
            tracing::info!(pod_uid = %key.0, container_id = %key.1, probe = ?key.2, result = ?r, "probe result changed");
            let _ = self.0.changed.send(key.0.clone());
        }
    }
}

struct Job {
    /// The pod's metadata (for events).
    pod: Pod,
    mgr: ProbeManager,
    key: ResultKey,
    container: Container,
    probe: Probe,
    ip: String,
    started_at_ns: i64,
}

impl Job {
    async fn run(self) {
        let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
        let period = secs(self.probe.period_seconds, 10).max(Duration::from_secs(1));
        let timeout = secs(self.probe.timeout_seconds, 1).max(Duration::from_secs(1));
        let delay = secs(self.probe.initial_delay_seconds, 0);
        let success_threshold = self.probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = self.probe.failure_threshold.unwrap_or(3).max(1);
        // Wait out the initial delay, counted from the container's start.
        let since_start = Duration::from_nanos(
            (crate::kubelet::kit::backoff::now_ns() - self.started_at_ns).max(0) as u64,
        );
        if let Some(rest) = delay.checked_sub(since_start) {
            tokio::time::sleep(rest).await;
        }
        let (uid, id, kind) = (self.key.0.clone(), self.key.1.clone(), self.key.2);
        let (mut ok_run, mut fail_run) = (0, 0);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if kind != Kind::Startup && !self.mgr.started(&uid, &id, &self.container) {
                continue;
            }
            let outcome = self.probe_once(timeout).await;
            match outcome {
                Outcome::Success => {
                    ok_run += 1;
                    fail_run = 0;
                    if ok_run >= success_threshold {
                        self.mgr.set(&self.key, ProbeResult::Success);
                        if kind == Kind::Startup {
                            return;
                        }
                    }
                }
                Outcome::Failure(msg) => {
                    fail_run += 1;
                    ok_run = 0;
                    tracing::debug!(pod_uid = %uid, container_id = %id, probe = ?kind, message = %msg, "probe failed");
                    self.mgr.0.recorder.container(
                        &self.pod,
                        &self.container.name,
                        crate::kubelet::kit::recorder::WARNING,
                        "Unhealthy",
                        &format!("{kind:?} probe failed: {msg}"),
                    );
                    lock(&self.mgr.0.messages).insert(self.key.clone(), msg);
                    if fail_run >= failure_threshold {
                        self.mgr.set(&self.key, ProbeResult::Failure);
                        if kind != Kind::Readiness {
                            // The container is killed; its successor gets a new worker.
                            return;
                        }
                    }
                }
            }
        }
    }

    async fn probe_once(&self, timeout: Duration) -> Outcome {
        let p = &self.probe;
        if let Some(e) = &p.exec {
            handlers::exec(
                &self.mgr.0.cri,
                &self.key.1,
                e.command.clone().unwrap_or_default(),
                timeout,
            )
            .await
        } else if let Some(h) = &p.http_get {
            handlers::http_get(h, &self.ip, &self.container, timeout).await
        } else if let Some(t) = &p.tcp_socket {
            handlers::tcp(t, &self.ip, &self.container, timeout).await
        } else {
            Outcome::Failure("probe has no supported handler".into())
        }
    }
}
