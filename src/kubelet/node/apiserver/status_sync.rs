//! Pod status to the API server, as the kubelet's status manager syncs it:
//!
//! - every status the status manager records is queued, the newest per
//!   pod, and patched in batches (every 200 ms, 8 at a time): a merge
//!   patch of `pods/NAME/status` with the pod's UID as precondition;
//!   a status equal to the last one patched is not sent again;
//! - a static pod (file or URL source) gets a mirror pod, the API copy
//!   that `kubectl get pods` shows, owned by the Node; its status is
//!   patched onto the mirror. A mirror of an edited static pod is
//!   replaced; one whose static pod is gone is deleted, once every source
//!   has reported;
//! - a pod of the API source that the kubelet finished terminating is
//!   deleted with grace period 0 (UID precondition), which ends a graceful
//!   deletion.
//!
//! Failures are retried at the next batch (a pod gone from the API server,
//! 404, or replaced, 409, is dropped).

use super::pods::{Mirrors, SOURCE};
use super::Reporter;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::defaults::annotation;
use crate::kubelet::kit::labels;
pub use crate::kubelet::managers::status_manager::Msg;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

pub fn is_static(pod: &Pod) -> bool {
    annotation(pod, labels::CONFIG_SOURCE).is_some_and(|s| s != SOURCE)
}

/// The merge patch for a status: fields the kubelet owns and that are
/// unset are cleared (null), `qosClass` is left to the API server.
pub fn patch_body(uid: &str, status: &PodStatus) -> serde_json::Value {
    let mut st = serde_json::to_value(status).unwrap_or_default();
    if let Some(o) = st.as_object_mut() {
        o.remove("qosClass");
        for k in ["podIP", "podIPs", "reason", "message"] {
            o.entry(k).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({"metadata": {"uid": uid}, "status": st})
}

/// The mirror pod of a static pod.
pub fn mirror_of(pod: &Pod, node: &str, node_uid: &str) -> Pod {
    let hash = annotation(pod, labels::CONFIG_HASH)
        .unwrap_or_else(|| defaults::uid(pod))
        .to_string();
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(labels::CONFIG_MIRROR.into(), hash);
    let mut spec = pod.spec.clone();
    if let Some(s) = spec.as_mut() {
        s.node_name = Some(node.into());
    }
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: Some(defaults::namespace(pod).into()),
            labels: pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.into(),
                uid: node_uid.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

fn uid_precondition(uid: &str, grace: Option<u32>) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: grace,
        preconditions: Some(Preconditions {
            uid: Some(uid.into()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

struct Syncer {
    client: kube::Client,
    node: String,
    node_uid: watch::Receiver<Option<String>>,
    mirrors: Mirrors,
    /// Every pod the kubelet holds a status for, by UID.
    pods: HashMap<String, Arc<Pod>>,
    /// Statuses to patch, by UID.
    dirty: HashMap<String, Arc<Pod>>,
    /// The last status patched, by UID.
    patched: HashMap<String, PodStatus>,
    /// API pods to delete (grace 0), by UID.
    deletes: HashMap<String, Arc<Pod>>,
    sources_ready: bool,
    /// Mirror pods created or deleted recently (full name → when).
    mirror_acted: HashMap<String, Instant>,
    rep: Reporter,
}

impl Syncer {
    fn api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Set(p) => {
                let uid = defaults::uid(&p).to_string();
                self.pods.insert(uid.clone(), p.clone());
                self.dirty.insert(uid, p);
            }
            Msg::Removed(p) => {
                let uid = defaults::uid(&p).to_string();
                self.pods.remove(&uid);
                self.dirty.remove(&uid);
                self.patched.remove(&uid);
                if !is_static(&p) {
                    self.deletes.insert(uid, p);
                }
            }
            Msg::SourcesReady => self.sources_ready = true,
        }
    }

    /// Where a pod's status goes: (namespace, name, UID in the API).
    fn target(&self, pod: &Pod) -> Option<(String, String, String)> {
        let ns = defaults::namespace(pod).to_string();
        let name = defaults::name(pod).to_string();
        if !is_static(pod) {
            return Some((ns, name, defaults::uid(pod).to_string()));
        }
        let hash = annotation(pod, labels::CONFIG_HASH)?;
        let m = self.mirrors.get(&defaults::full_name(pod))?;
        (annotation(&m, labels::CONFIG_MIRROR) == Some(hash)
            && m.metadata.deletion_timestamp.is_none())
        .then(|| (ns, name, m.metadata.uid.clone().unwrap_or_default()))
    }

    async fn patch_statuses(&mut self) {
        let patched = &self.patched;
        self.dirty
            .retain(|u, p| patched.get(u) != p.status.as_ref());
        let ready: Vec<(String, Arc<Pod>)> = self
            .dirty
            .iter()
            .map(|(u, p)| (u.clone(), p.clone()))
            .collect();
        for chunk in ready.chunks(8) {
            let calls = chunk.iter().filter_map(|(uid, pod)| {
                let (ns, name, api_uid) = self.target(pod)?;
                let status = pod.status.clone().unwrap_or_default();
                let body = patch_body(&api_uid, &status);
                let api = self.api(&ns);
                Some(async move {
                    let r = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                        .await;
                    (uid.clone(), status, r)
                })
            });
            for (uid, status, r) in futures::future::join_all(calls).await {
                match r {
                    Ok(_) => {
                        self.rep.ok();
                        self.dirty.remove(&uid);
                        self.patched.insert(uid, status);
                    }
                    Err(e) if matches!(super::code(&e), Some(404) | Some(409)) => {
                        tracing::debug!(pod_uid = %uid, error = %e, "pod status not patched: the pod is gone or replaced");
                        self.dirty.remove(&uid);
                    }
                    Err(e) => self.rep.failed(&super::describe(&e)),
                }
            }
        }
    }

    async fn delete_finished(&mut self) {
        let todo: Vec<(String, Arc<Pod>)> = self
            .deletes
            .iter()
            .map(|(u, p)| (u.clone(), p.clone()))
            .collect();
        for (uid, pod) in todo {
            let r = self
                .api(defaults::namespace(&pod))
                .delete(defaults::name(&pod), &uid_precondition(&uid, Some(0)))
                .await;
            match r {
                Ok(_) => {
                    tracing::info!(pod = %defaults::full_name(&pod), "pod deleted from the API server");
                    self.deletes.remove(&uid);
                }
                Err(e) if matches!(super::code(&e), Some(404) | Some(409)) => {
                    self.deletes.remove(&uid);
                }
                Err(e) => self.rep.failed(&super::describe(&e)),
            }
        }
    }

    fn acted_recently(&self, name: &str) -> bool {
        self.mirror_acted
            .get(name)
            .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
    }

    async fn sync_mirrors(&mut self) {
        let Some(node_uid) = self.node_uid.borrow().clone() else {
            return;
        };
        let statics: HashMap<String, Arc<Pod>> = self
            .pods
            .values()
            .filter(|p| is_static(p))
            .map(|p| (defaults::full_name(p), p.clone()))
            .collect();
        for (name, pod) in &statics {
            if self.acted_recently(name) {
                continue;
            }
            let hash = annotation(pod, labels::CONFIG_HASH).unwrap_or_default();
            let api = self.api(defaults::namespace(pod));
            match self.mirrors.get(name) {
                None => {
                    let m = mirror_of(pod, &self.node, &node_uid);
                    match api.create(&PostParams::default(), &m).await {
                        Ok(_) => {
                            tracing::info!(pod = %name, "mirror pod created");
                        }
                        Err(e) if super::code(&e) == Some(409) => {}
                        Err(e) => self.rep.failed(&super::describe(&e)),
                    }
                }
                Some(m) if annotation(&m, labels::CONFIG_MIRROR) != Some(hash) => {
                    let uid = m.metadata.uid.clone().unwrap_or_default();
                    if m.metadata.deletion_timestamp.is_none() {
                        tracing::info!(pod = %name, "deleting an outdated mirror pod");
                        if let Err(e) = api
                            .delete(defaults::name(pod), &uid_precondition(&uid, Some(0)))
                            .await
                        {
                            self.rep.failed(&super::describe(&e));
                        }
                    }
                }
                Some(_) => continue,
            }
            self.mirror_acted.insert(name.clone(), Instant::now());
        }
        if !self.sources_ready {
            return;
        }
        for m in self.mirrors.all() {
            let name = defaults::full_name(&m);
            if statics.contains_key(&name) || self.acted_recently(&name) {
                continue;
            }
            let uid = m.metadata.uid.clone().unwrap_or_default();
            tracing::info!(pod = %name, "deleting the mirror pod of a static pod that is gone");
            if let Err(e) = self
                .api(defaults::namespace(&m))
                .delete(defaults::name(&m), &uid_precondition(&uid, Some(0)))
                .await
            {
                if !matches!(super::code(&e), Some(404) | Some(409)) {
                    self.rep.failed(&super::describe(&e));
                }
            }
            self.mirror_acted.insert(name, Instant::now());
        }
        self.mirror_acted
            .retain(|_, t| t.elapsed() < Duration::from_secs(60));
    }
}

/// The task: runs until `rx` closes.
pub async fn run(
    client: kube::Client,
    node: String,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    mirrors: Mirrors,
    node_uid: watch::Receiver<Option<String>>,
) {
    let mut s = Syncer {
        client,
        node,
        node_uid,
        mirrors,
        pods: HashMap::new(),
        dirty: HashMap::new(),
        patched: HashMap::new(),
        deletes: HashMap::new(),
        sources_ready: false,
        mirror_acted: HashMap::new(),
        rep: Reporter::new("pod status"),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mirror_tick = Instant::now();
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(m) => s.handle(m),
                None => return,
            },
            _ = tick.tick() => {
                while let Ok(m) = rx.try_recv() {
                    s.handle(m);
                }
                s.patch_statuses().await;
                s.delete_finished().await;
                if mirror_tick.elapsed() >= Duration::from_secs(1) {
                    s.sync_mirrors().await;
                    mirror_tick = Instant::now();
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(y: &str) -> Pod {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn patch_clears_what_is_unset_and_keeps_qos_to_the_server() {
        let st: PodStatus =
            serde_yaml::from_str("phase: Running\nqosClass: BestEffort\nhostIP: 10.0.0.1\n")
                .unwrap();
        let b = patch_body("u1", &st);
        assert_eq!(b["metadata"]["uid"], "u1");
        assert_eq!(b["status"]["phase"], "Running");
        assert_eq!(b["status"]["hostIP"], "10.0.0.1");
        assert!(b["status"]["podIP"].is_null());
        assert!(b["status"].as_object().unwrap().contains_key("podIP"));
        assert!(!b["status"].as_object().unwrap().contains_key("qosClass"));
    }

    #[test]
    fn mirrors_carry_the_hash_and_the_node_owner() {
        let p = pod("metadata: {name: web-n1, namespace: kube-system, uid: abc, annotations: {kubernetes.io/config.source: file, kubernetes.io/config.hash: abc}}\nspec: {containers: [{name: c, image: x}]}\nstatus: {phase: Running}\n");
        assert!(is_static(&p));
        let m = mirror_of(&p, "n1", "node-uid");
        assert_eq!(m.metadata.uid, None);
        assert_eq!(m.status, None);
        let a = m.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[labels::CONFIG_MIRROR], "abc");
        let o = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
            ("Node", "n1", "node-uid")
        );
        assert_eq!(m.spec.unwrap().node_name.as_deref(), Some("n1"));
        let api = pod("metadata: {name: a, annotations: {kubernetes.io/config.source: api}}\nspec: {containers: []}\n");
        assert!(!is_static(&api));
    }
}
