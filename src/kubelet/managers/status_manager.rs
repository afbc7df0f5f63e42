//! The status manager: the latest status of every pod, written as JSON
//! (the whole Pod object, as `kubectl get pod -o json` prints it) to
//! `<status_dir>/<namespace>_<name>.json` when it changes, and each change
//! of a pod's kubectl-style row (READY, STATUS, RESTARTS) sent to whoever
//! displays it. A removed pod's file is deleted.
//!
//! Writes are atomic (temp file + rename), so readers never see half a file.
//! With an API server, every change (and every removal) also goes to
//! `apiserver::status_sync`, which patches it there.

use crate::kubelet::kit::defaults;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// What the status manager tells the API server's status sync.
#[derive(Debug, Clone)]
pub enum Msg {
    /// A pod's new status (the whole pod as the kubelet holds it).
    Set(Arc<Pod>),
    /// The kubelet is done with a pod (terminated and removed).
    Removed(Arc<Pod>),
    /// Every source has sent its first snapshot.
    SourcesReady,
}

/// A row of `kubectl get pods`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub namespace: String,
    pub ready: String,
    pub status: String,
    pub restarts: i32,
}

/// What the display receives.
#[derive(Debug, Clone)]
pub struct StatusEvent {
    pub pod: Arc<Pod>,
    pub row: Row,
    /// The pod is gone from the node.
    pub removed: bool,
}

/// kubectl's STATUS column and counts (printPod).
pub fn row(pod: &Pod) -> Row {
    let st = pod.status.clone().unwrap_or_default();
    let total = defaults::containers(pod).len();
    let mut reason = st
        .reason
        .clone()
        .or(st.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    let mut restarts = 0;
    let mut ready = 0;
    let mut initializing = false;
    let inits = st.init_container_statuses.clone().unwrap_or_default();
    let n_init = defaults::init_containers(pod).len();
    for (i, c) in inits.iter().enumerate() {
        restarts += c.restart_count;
        let s = c.state.clone().unwrap_or_default();
        if let Some(t) = &s.terminated {
            if t.exit_code == 0 {
                continue;
            }
            reason = match &t.reason {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => format!("Init:ExitCode:{}", t.exit_code),
            };
        } else if let Some(r) = s
            .waiting
            .as_ref()
            .and_then(|w| w.reason.clone())
            .filter(|r| !r.is_empty() && r != "PodInitializing")
        {
            reason = format!("Init:{r}");
        } else {
            reason = format!("Init:{i}/{n_init}");
        }
        initializing = true;
        break;
    }
    if !initializing {
        restarts = 0;
        let mut has_running = false;
        for c in st.container_statuses.iter().flatten().rev() {
            restarts += c.restart_count;
            let s = c.state.clone().unwrap_or_default();
            if let Some(r) = s
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .filter(|r| !r.is_empty())
            {
                reason = r;
            } else if let Some(t) = &s.terminated {
                reason = match &t.reason {
                    Some(r) if !r.is_empty() => r.clone(),
                    _ => format!("ExitCode:{}", t.exit_code),
                };
            } else if c.ready && s.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = st
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if pod.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    Row {
        name: defaults::name(pod).into(),
        namespace: defaults::namespace(pod).into(),
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
    }
}

struct Entry {
    pod: Arc<Pod>,
    row: Row,
}

pub struct StatusManager {
    dir: Option<PathBuf>,
    pods: Mutex<HashMap<String, Entry>>,
    tx: mpsc::UnboundedSender<StatusEvent>,
    api: Option<mpsc::UnboundedSender<Msg>>,
}

impl StatusManager {
    pub fn new(
        dir: Option<PathBuf>,
        tx: mpsc::UnboundedSender<StatusEvent>,
        api: Option<mpsc::UnboundedSender<Msg>>,
    ) -> StatusManager {
        if let Some(d) = &dir {
            let _ = std::fs::create_dir_all(d);
        }
        StatusManager {
            dir,
            pods: Mutex::new(HashMap::new()),
            tx,
            api,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every pod with a status (the whole object), for the kubelet API.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.lock().values().map(|e| e.pod.clone()).collect()
    }

    /// The pod named `namespace/name` (the newest, if several).
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.lock()
            .values()
            .filter(|e| defaults::namespace(&e.pod) == namespace && defaults::name(&e.pod) == name)
            .map(|e| e.pod.clone())
            .max_by_key(|p| p.metadata.deletion_timestamp.is_none())
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        self.lock().get(uid).and_then(|e| e.pod.status.clone())
    }

    fn path(&self, pod: &Pod) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| {
            d.join(format!(
                "{}_{}.json",
                defaults::namespace(pod),
                defaults::name(pod)
            ))
        })
    }

    /// Records a pod's status (`pod` is the spec as the kubelet holds it).
    pub fn set(&self, pod: &Pod, status: PodStatus) {
        let uid = defaults::uid(pod).to_string();
        let mut full = pod.clone();
        full.status = Some(status);
        let r = row(&full);
        let changed = {
            let pods = self.lock();
            match pods.get(&uid) {
                Some(e) => *e.pod != full,
                None => true,
            }
        };
        if !changed {
            return;
        }
        if let Some(p) = self.path(&full) {
            write_atomic(&p, &full);
        }
        let full = Arc::new(full);
        if let Some(api) = &self.api {
            let _ = api.send(Msg::Set(full.clone()));
        }
        let row_changed = {
            let mut pods = self.lock();
            let old = pods.insert(
                uid,
                Entry {
                    pod: full.clone(),
                    row: r.clone(),
                },
            );
            old.is_none_or(|o| o.row != r)
        };
        if row_changed {
            let _ = self.tx.send(StatusEvent {
                pod: full,
                row: r,
                removed: false,
            });
        }
    }

    /// Deletes status files of pods this kubelet does not know (pods
    /// deleted while it was down); called once the sources have reported.
    pub fn prune_files(&self) {
        let Some(dir) = &self.dir else { return };
        let known: Vec<PathBuf> = self
            .lock()
            .values()
            .filter_map(|e| self.path(&e.pod))
            .collect();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".json") && name.contains('_') && !known.contains(&p) {
                tracing::debug!(path = %p.display(), "removing the status of an unknown pod");
                let _ = std::fs::remove_file(p);
            }
        }
    }

    /// Forgets a pod that is gone from the node, deleting its file; the
    /// API server hears of it even when no status was kept (a pod deleted
    /// while the kubelet was down, torn down by the restarted one).
    pub fn remove(&self, uid: &str, pod: &Pod) {
        let (e, shared) = {
            let mut pods = self.lock();
            let Some(e) = pods.remove(uid) else {
                if let Some(api) = &self.api {
                    let _ = api.send(Msg::Removed(Arc::new(pod.clone())));
                }
                return;
            };
            let name = defaults::full_name(&e.pod);
            let shared = pods.values().any(|o| defaults::full_name(&o.pod) == name);
            (e, shared)
        };
        // The file is named after the pod: another pod of that name keeps it.
        if let (Some(p), false) = (self.path(&e.pod), shared) {
            let _ = std::fs::remove_file(p);
        }
        if let Some(api) = &self.api {
            let _ = api.send(Msg::Removed(e.pod.clone()));
        }
        let _ = self.tx.send(StatusEvent {
            pod: e.pod,
            row: e.row,
            removed: true,
        });
    }
}

fn write_atomic(path: &std::path::Path, pod: &Pod) {
    let Ok(json) = serde_json::to_vec_pretty(pod) else {
        return;
    };
    let tmp = path.with_extension("json.tmp");
    if std::fs::write(&tmp, json).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(status: &str) -> Pod {
        let y = format!("metadata: {{name: p}}\nspec:\n  initContainers: [{{name: i, image: x}}]\n  containers: [{{name: a, image: x}}, {{name: b, image: x}}]\nstatus:\n{status}");
        serde_yaml::from_str(&y).unwrap()
    }

    #[test]
    fn rows_read_like_kubectl() {
        let p = pod("  phase: Pending\n  initContainerStatuses: [{name: i, image: x, imageID: '', ready: false, restartCount: 2, state: {running: {}}}]\n");
        let r = row(&p);
        assert_eq!(
            (r.status.as_str(), r.ready.as_str(), r.restarts),
            ("Init:0/1", "0/2", 2)
        );
        let p = pod("  phase: Running\n  initContainerStatuses: [{name: i, image: x, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 0}}}]\n  containerStatuses:\n  - {name: a, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}\n  - {name: b, image: x, imageID: '', ready: false, restartCount: 4, state: {waiting: {reason: CrashLoopBackOff}}}\n");
        let r = row(&p);
        assert_eq!(
            (r.status.as_str(), r.ready.as_str(), r.restarts),
            ("CrashLoopBackOff", "1/2", 4)
        );
        let p = pod("  phase: Failed\n  reason: InvalidPod\n");
        assert_eq!(row(&p).status, "InvalidPod");
        let mut p = pod("  phase: Running\n");
        p.metadata.deletion_timestamp = Some(defaults::now());
        assert_eq!(row(&p).status, "Terminating");
    }
}
