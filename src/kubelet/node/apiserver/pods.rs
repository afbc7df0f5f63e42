//! The API-server pod source: a list-watch of the pods bound to this node
//! (`spec.nodeName=NODE`), sent to the sync loop as snapshots of source
//! `api`, merged with the file and URL sources like any other.
//!
//! The watcher (kube-rs) resumes from the last resourceVersion, asks for
//! bookmarks, lists again on 410 Gone and backs off on errors. A relist
//! builds a new set and replaces the old one only when it is complete, so
//! a restarted watch yields no spurious deletes, and since pods are keyed
//! by UID, no duplicate sandboxes. Mirror pods (the API copies of this
//! node's static pods) are not pods to run: they go to [`Mirrors`].

use super::Reporter;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::pods::sources::SourceSnapshot;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

pub const SOURCE: &str = "api";

/// Mirror pods in the API server, by full name (`namespace/name`).
#[derive(Default, Clone)]
pub struct Mirrors(Arc<Mutex<HashMap<String, Pod>>>);

impl Mirrors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pod>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn get(&self, full_name: &str) -> Option<Pod> {
        self.lock().get(full_name).cloned()
    }
    pub fn all(&self) -> Vec<Pod> {
        self.lock().values().cloned().collect()
    }
    fn replace(&self, pods: HashMap<String, Pod>) {
        *self.lock() = pods;
    }
    fn set(&self, pod: Pod) {
        self.lock().insert(defaults::full_name(&pod), pod);
    }
    fn remove(&self, pod: &Pod) {
        let name = defaults::full_name(pod);
        let mut m = self.lock();
        if m.get(&name).map(|p| &p.metadata.uid) == Some(&pod.metadata.uid) {
            m.remove(&name);
        }
    }
}

pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::CONFIG_MIRROR))
}

/// A pod from the API server as the kubelet holds it: annotated with its
/// source and the time it was first seen.
pub fn adopt(mut pod: Pod, seen: Option<&Pod>) -> Pod {
    defaults::apply(&mut pod);
    let seen_at = seen
        .and_then(|p| p.metadata.annotations.as_ref())
        .and_then(|a| a.get(labels::CONFIG_SEEN).cloned())
        .unwrap_or_else(|| defaults::now().0.to_string());
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(labels::CONFIG_SOURCE.into(), SOURCE.into());
    ann.insert(labels::CONFIG_SEEN.into(), seen_at);
    pod
}

/// The pods the source holds (by UID) and the list being rebuilt.
#[derive(Default)]
pub struct State {
    pub pods: BTreeMap<String, Pod>,
    relisting: Option<(BTreeMap<String, Pod>, HashMap<String, Pod>)>,
    pub listed: bool,
}

impl State {
    /// Applies one watch event; true when the pod set to report changed.
    pub fn apply(&mut self, ev: Event<Pod>, mirrors: &Mirrors) -> bool {
        match ev {
            Event::Init => {
                self.relisting = Some((BTreeMap::new(), HashMap::new()));
                false
            }
            Event::InitApply(p) => {
                if let Some((pods, mirror)) = self.relisting.as_mut() {
                    if is_mirror(&p) {
                        mirror.insert(defaults::full_name(&p), p);
                    } else {
                        let uid = defaults::uid(&p).to_string();
                        let p = adopt(p, self.pods.get(&uid));
                        pods.insert(uid, p);
                    }
                }
                false
            }
            Event::InitDone => {
                if let Some((pods, mirror)) = self.relisting.take() {
                    self.pods = pods;
                    mirrors.replace(mirror);
                }
                self.listed = true;
                true
            }
            Event::Apply(p) => {
                if is_mirror(&p) {
                    mirrors.set(p);
                    return false;
                }
                let uid = defaults::uid(&p).to_string();
                let p = adopt(p, self.pods.get(&uid));
                self.pods.insert(uid, p);
                self.listed
            }
            Event::Delete(p) => {
                if is_mirror(&p) {
                    mirrors.remove(&p);
                    return false;
                }
                self.pods.remove(defaults::uid(&p));
                self.listed
            }
        }
    }

    pub fn snapshot(&self) -> SourceSnapshot {
        SourceSnapshot {
            source: SOURCE.into(),
            pods: self.pods.values().cloned().collect(),
            errors: Vec::new(),
        }
    }
}

fn describe(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(k) => format!("list: {}", super::describe(k)),
        watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            format!("watch: {}", super::describe(k))
        }
        watcher::Error::WatchError(s) => format!("watch: {} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// The source task: runs until aborted.
pub async fn run(
    client: kube::Client,
    node: String,
    tx: mpsc::Sender<SourceSnapshot>,
    mirrors: Mirrors,
) {
    let api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut state = State::default();
    let mut rep = Reporter::new("pod watch");
    while let Some(ev) = stream.next().await {
        let mut changed = false;
        let mut ev = Some(ev);
        // Apply everything already received, then send one snapshot.
        while let Some(e) = ev.take() {
            match e {
                Ok(e) => {
                    rep.ok();
                    changed |= state.apply(e, &mirrors);
                }
                Err(e) => rep.failed(&describe(&e)),
            }
            ev = stream.next().now_or_never().flatten();
        }
        if changed && tx.send(state.snapshot()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, mirror: bool) -> Pod {
        let mut y = format!("metadata: {{name: {name}, namespace: default, uid: {uid}");
        if mirror {
            y.push_str(", annotations: {kubernetes.io/config.mirror: h}");
        }
        y.push_str("}\nspec: {nodeName: n, containers: [{name: c, image: x}]}\n");
        serde_yaml::from_str(&y).unwrap()
    }

    fn names(s: &State) -> Vec<String> {
        s.snapshot()
            .pods
            .iter()
            .map(|p| defaults::name(p).to_string())
            .collect()
    }

    #[test]
    fn relists_replace_only_when_complete_and_mirrors_are_set_apart() {
        let m = Mirrors::default();
        let mut s = State::default();
        assert!(!s.apply(Event::Init, &m));
        assert!(!s.apply(Event::InitApply(pod("a", "1", false)), &m));
        assert!(!s.apply(Event::InitApply(pod("s-n", "9", true)), &m));
        assert!(s.snapshot().pods.is_empty());
        assert!(s.apply(Event::InitDone, &m));
        assert_eq!(names(&s), ["a"]);
        assert!(m.get("default/s-n").is_some());
        let seen = s.pods["1"].metadata.annotations.as_ref().unwrap()[labels::CONFIG_SEEN].clone();
        assert_eq!(
            s.pods["1"].metadata.annotations.as_ref().unwrap()[labels::CONFIG_SOURCE],
            SOURCE
        );
        assert!(s.apply(Event::Apply(pod("b", "2", false)), &m));
        // A relist (after 410 Gone) keeps the old set until it is done.
        s.apply(Event::Init, &m);
        s.apply(Event::InitApply(pod("b", "2", false)), &m);
        s.apply(Event::InitApply(pod("a", "1", false)), &m);
        assert_eq!(names(&s), ["a", "b"]);
        assert!(s.apply(Event::InitDone, &m));
        assert_eq!(names(&s), ["a", "b"]);
        // The first-seen time survives the relist.
        assert_eq!(
            s.pods["1"].metadata.annotations.as_ref().unwrap()[labels::CONFIG_SEEN],
            seen
        );
        assert!(m.get("default/s-n").is_none());
        assert!(s.apply(Event::Delete(pod("a", "1", false)), &m));
        assert_eq!(names(&s), ["b"]);
        assert!(!s.apply(Event::Apply(pod("s-n", "9", true)), &m));
        assert!(m.get("default/s-n").is_some());
        assert!(!s.apply(Event::Delete(pod("s-n", "9", true)), &m));
        assert!(m.all().is_empty());
    }
}
