//! Pod sources and their merge (the kubelet's PodConfig).
//!
//! A source sends complete snapshots of the pods it defines
//! ([`SourceSnapshot`]); [`PodConfig`] keeps the last snapshot of each
//! source and turns a new one into ADD / UPDATE / DELETE / RECONCILE
//! updates for the sync loop. Two sources ship here: a manifest directory
//! (watched with inotify, rescanned periodically, like `--pod-manifest-path`)
//! and an HTTP URL polled (like `--manifest-url`). An API-server source
//! would be one more task sending snapshots (or, later, incremental
//! changes) under its own source name; nothing else changes.
//!
//! Manifests are Pod YAML or JSON as kubectl writes them, several
//! documents per file allowed, `kind: List` unwrapped. Pods from these
//! sources are static pods: their name gets `-<node name>` appended and,
//! unless the manifest sets one, their UID is a hash of the node, the
//! origin and the content, so an edited manifest is a new pod (the old one
//! is deleted) and a restarted kubelet derives the same UID again.

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A manifest (or a document in one) that could not become a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    /// The file or URL (and document index) it came from.
    pub origin: String,
    pub message: String,
}

/// Everything one source defines right now.
#[derive(Debug, Clone)]
pub struct SourceSnapshot {
    pub source: String,
    pub pods: Vec<Pod>,
    pub errors: Vec<ManifestError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A pod not seen before.
    Add,
    /// A pod whose spec, labels or annotations changed.
    Update,
    /// A pod its source no longer defines.
    Delete,
    /// Only the pod's status differs (sources that carry status, such as an
    /// API server, use this).
    Reconcile,
}

#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub op: Op,
    pub source: String,
    pub pod: Arc<Pod>,
}

/// The multiplexer: per-source state, merged into updates.
#[derive(Default)]
pub struct PodConfig {
    sources: HashMap<String, BTreeMap<String, Arc<Pod>>>,
    errors: HashMap<String, Vec<ManifestError>>,
}

impl PodConfig {
    /// Whether every source in `names` has delivered a snapshot.
    pub fn seen_all(&self, names: &[String]) -> bool {
        names.iter().all(|n| self.sources.contains_key(n))
    }

    /// Merges a snapshot; returns the updates and the errors that are new
    /// since this source's previous snapshot.
    pub fn merge(&mut self, snap: SourceSnapshot) -> (Vec<PodUpdate>, Vec<ManifestError>) {
        let mut errors = snap.errors;
        // Pod names are unique on a node across all sources.
        let mut taken: HashMap<String, String> = self
            .sources
            .iter()
            .filter(|(s, _)| **s != snap.source)
            .flat_map(|(_, pods)| {
                pods.iter()
                    .map(|(uid, p)| (defaults::full_name(p), uid.clone()))
            })
            .collect();
        let mut next: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
        for pod in snap.pods {
            let uid = defaults::uid(&pod).to_string();
            let full = defaults::full_name(&pod);
            match taken.get(&full) {
                Some(other) if *other != uid => {
                    errors.push(ManifestError {
                        origin: defaults::annotation(&pod, labels::CONFIG_SOURCE)
                            .unwrap_or_default()
                            .to_string(),
                        message: format!(
                            "pod {full} is defined twice; the later definition is ignored"
                        ),
                    });
                    continue;
                }
                _ => {}
            }
            if next.contains_key(&uid) {
                errors.push(ManifestError {
                    origin: snap.source.clone(),
                    message: format!(
                        "pod {full} (uid {uid}) is defined twice; the later definition is ignored"
                    ),
                });
                continue;
            }
            taken.insert(full, uid.clone());
            next.insert(uid, Arc::new(pod));
        }
        let prev = self.sources.remove(&snap.source).unwrap_or_default();
        // Deletes first: a replaced pod's name is free before its successor starts.
        let mut updates = Vec::new();
        for (uid, pod) in &prev {
            if !next.contains_key(uid) {
                updates.push(PodUpdate {
                    op: Op::Delete,
                    source: snap.source.clone(),
                    pod: pod.clone(),
                });
            }
        }
        for (uid, pod) in &next {
            let op = match prev.get(uid) {
                None => Some(Op::Add),
                Some(old) if !same_spec(old, pod) => Some(Op::Update),
                Some(old) if old.status != pod.status => Some(Op::Reconcile),
                Some(_) => None,
            };
            if let Some(op) = op {
                updates.push(PodUpdate {
                    op,
                    source: snap.source.clone(),
                    pod: pod.clone(),
                });
            }
        }
        // Keep the old objects where nothing changed (stable seen times).
        let merged = next
            .into_iter()
            .map(|(uid, p)| match prev.get(&uid) {
                Some(old) if same_spec(old, &p) && old.status == p.status => (uid, old.clone()),
                _ => (uid, p),
            })
            .collect();
        self.sources.insert(snap.source.clone(), merged);
        let old_errors = self
            .errors
            .insert(snap.source, errors.clone())
            .unwrap_or_default();
        let fresh = errors
            .into_iter()
            .filter(|e| !old_errors.contains(e))
            .collect();
        (updates, fresh)
    }
}

/// Spec, labels, annotations (but the seen time) and deletion equal.
fn same_spec(a: &Pod, b: &Pod) -> bool {
    let strip = |p: &Pod| {
        let mut m = p.metadata.annotations.clone().unwrap_or_default();
        m.remove(labels::CONFIG_SEEN);
        m
    };
    a.spec == b.spec
        && a.metadata.labels == b.metadata.labels
        && strip(a) == strip(b)
        && a.metadata.deletion_timestamp == b.metadata.deletion_timestamp
        && a.metadata.deletion_grace_period_seconds == b.metadata.deletion_grace_period_seconds
}

/// Parses a manifest: YAML (several documents) or JSON, Pods or Lists.
pub fn parse_manifest(text: &str) -> Vec<Result<Pod, String>> {
    let mut docs: Vec<Result<serde_json::Value, String>> = Vec::new();
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
        for v in stream.by_ref() {
            docs.push(v.map_err(|e| format!("invalid JSON: {e}")));
        }
    } else {
        for de in serde_yaml::Deserializer::from_str(text) {
            let v = <serde_json::Value as serde::Deserialize>::deserialize(de)
                .map_err(|e| format!("invalid YAML: {e}"));
            let failed = v.is_err();
            docs.push(v);
            // The document stream cannot resynchronise after a syntax error.
            if failed {
                break;
            }
        }
    }
    let mut out = Vec::new();
    for d in docs {
        match d {
            Err(e) => out.push(Err(e)),
            Ok(serde_json::Value::Null) => {}
            Ok(serde_json::Value::Array(items)) => out.extend(items.into_iter().map(to_pod)),
            Ok(v) => match v.get("kind").and_then(|k| k.as_str()) {
                Some("List") | Some("PodList") => {
                    let items = v
                        .get("items")
                        .and_then(|i| i.as_array())
                        .cloned()
                        .unwrap_or_default();
                    out.extend(items.into_iter().map(to_pod));
                }
                _ => out.push(to_pod(v)),
            },
        }
    }
    out
}

fn to_pod(mut v: serde_json::Value) -> Result<Pod, String> {
    let Some(obj) = v.as_object_mut() else {
        return Err("a manifest document must be an object".into());
    };
    match obj.get("kind").and_then(|k| k.as_str()) {
        None => {
            obj.insert("kind".into(), "Pod".into());
        }
        Some("Pod") => {}
        Some(other) => {
            return Err(format!(
                "kind {other:?} is not supported: only Pod (or a List of Pods)"
            ))
        }
    }
    match obj.get("apiVersion").and_then(|k| k.as_str()) {
        None => {
            obj.insert("apiVersion".into(), "v1".into());
        }
        Some("v1") => {}
        Some(other) => {
            return Err(format!(
                "apiVersion {other:?} is not supported for Pods: use v1"
            ))
        }
    }
    serde_json::from_value::<Pod>(v).map_err(|e| format!("not a valid Pod: {e}"))
}

/// What the kubelet does to a pod from a file or HTTP source.
pub fn make_static(mut pod: Pod, node: &str, source: &str, origin: &str) -> Pod {
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        let mut h = Sha256::new();
        h.update(format!("host:{node}\n{source}:{origin}\n"));
        h.update(serde_json::to_vec(&pod).unwrap_or_default());
        pod.metadata.uid = Some(hex::encode(&h.finalize()[..16]));
    }
    if let Some(n) = pod.metadata.name.as_mut() {
        if !n.is_empty() {
            *n = format!("{n}-{}", node.to_lowercase());
        }
    }
    defaults::apply(&mut pod);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    let uid = defaults::uid(&pod).to_string();
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(labels::CONFIG_SOURCE.into(), source.into());
    ann.insert(labels::CONFIG_HASH.into(), uid);
    ann.entry(labels::CONFIG_SEEN.into())
        .or_insert_with(|| defaults::now().0.to_string());
    pod
}

/// Reads one manifest file into pods and errors.
fn read_file(path: &Path, node: &str, pods: &mut Vec<Pod>, errors: &mut Vec<ManifestError>) {
    let origin = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            errors.push(ManifestError {
                origin,
                message: format!("cannot read: {e}"),
            });
            return;
        }
    };
    for (i, r) in parse_manifest(&text).into_iter().enumerate() {
        match r {
            Ok(p) => pods.push(make_static(p, node, "file", &format!("{origin}#{i}"))),
            Err(message) => errors.push(ManifestError {
                origin: format!("{origin} (document {})", i + 1),
                message,
            }),
        }
    }
}

/// Every pod in a manifest file or directory (non-recursive, hidden files
/// skipped, as the kubelet does).
pub fn scan_path(path: &Path, node: &str) -> (Vec<Pod>, Vec<ManifestError>) {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    if path.is_file() {
        read_file(path, node, &mut pods, &mut errors);
    } else if let Ok(rd) = std::fs::read_dir(path) {
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            read_file(&f, node, &mut pods, &mut errors);
        }
    }
    (pods, errors)
}

/// The manifest directory source: a snapshot on start, on every inotify
/// event (debounced), and every `period`.
pub async fn watch_dir(
    path: PathBuf,
    node: String,
    period: Duration,
    tx: mpsc::Sender<SourceSnapshot>,
) {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .ok()
        .and_then(|fd| {
            // SAFETY: the OwnedFd moves into the AsyncFd, which owns it for
            // its whole life: it stays open and names the same inotify
            // instance until the AsyncFd is dropped.
            unsafe { tokio::io::unix::AsyncFd::register(fd) }.ok()
        });
    let mut watching = false;
    let mut last: Option<(Vec<Pod>, Vec<ManifestError>)> = None;
    loop {
        if let (Some(fd), false) = (&fd, watching) {
            let flags = inotify::WatchFlags::CREATE
                | inotify::WatchFlags::DELETE
                | inotify::WatchFlags::MODIFY
                | inotify::WatchFlags::CLOSE_WRITE
                | inotify::WatchFlags::MOVED_TO
                | inotify::WatchFlags::MOVED_FROM
                | inotify::WatchFlags::ATTRIB
                | inotify::WatchFlags::DELETE_SELF
                | inotify::WatchFlags::MOVE_SELF;
            watching = inotify::add_watch(fd.get_ref(), &path, flags).is_ok();
        }
        let (pods, errors) = scan_path(&path, &node);
        // Unchanged content keeps the first seen time: compare without it.
        let fresh = last
            .as_ref()
            .is_none_or(|(p, e)| !same_pods(p, &pods) || *e != errors);
        if fresh {
            last = Some((pods.clone(), errors.clone()));
            let snap = SourceSnapshot {
                source: "file".into(),
                pods,
                errors,
            };
            if tx.send(snap).await.is_err() {
                return;
            }
        }
        let wait = async {
            match &fd {
                Some(fd) if watching => {
                    if let Ok(mut guard) = fd.readable().await {
                        let mut buf = [0u8; 4096];
                        loop {
                            match rustix::io::read(fd.get_ref(), &mut buf) {
                                Ok(n) if n > 0 => {
                                    // A watched directory that went away needs a new watch.
                                    if contains_self_event(&buf[..n]) {
                                        return true;
                                    }
                                }
                                _ => break,
                            }
                        }
                        guard.clear_ready();
                    }
                    // Let a burst of writes settle before rescanning.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    false
                }
                _ => {
                    std::future::pending::<()>().await;
                    false
                }
            }
        };
        tokio::select! {
            lost = wait => if lost { watching = false; },
            _ = tokio::time::sleep(period) => { watching = watching && path.exists(); }
        }
    }
}

fn same_pods(a: &[Pod], b: &[Pod]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| defaults::uid(x) == defaults::uid(y) && same_spec(x, y))
}

/// Whether raw inotify events include IN_DELETE_SELF / IN_MOVE_SELF / IN_IGNORED.
fn contains_self_event(buf: &[u8]) -> bool {
    let mut off = 0;
    while off + 16 <= buf.len() {
        let mask = u32::from_ne_bytes([buf[off + 4], buf[off + 5], buf[off + 6], buf[off + 7]]);
        let len = u32::from_ne_bytes([buf[off + 12], buf[off + 13], buf[off + 14], buf[off + 15]])
            as usize;
        if mask & (0x400 | 0x800 | 0x8000) != 0 {
            return true;
        }
        off += 16 + len;
    }
    false
}

/// The manifest URL source: polled every `period`; a failed fetch keeps
/// the previous snapshot (and is reported once).
pub async fn poll_url(
    url: String,
    node: String,
    period: Duration,
    tx: mpsc::Sender<SourceSnapshot>,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = tx
                .send(SourceSnapshot {
                    source: "http".into(),
                    pods: Vec::new(),
                    errors: vec![ManifestError {
                        origin: url.clone(),
                        message: format!("cannot build an HTTP client: {e}"),
                    }],
                })
                .await;
            return;
        }
    };
    let mut last_body: Option<String> = None;
    loop {
        let got = async {
            let r = client.get(&url).send().await.map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("HTTP {}", r.status()));
            }
            r.text().await.map_err(|e| e.to_string())
        }
        .await;
        match got {
            Ok(body) if last_body.as_ref() != Some(&body) => {
                let mut pods = Vec::new();
                let mut errors = Vec::new();
                for (i, r) in parse_manifest(&body).into_iter().enumerate() {
                    match r {
                        Ok(p) => pods.push(make_static(p, &node, "http", &format!("{url}#{i}"))),
                        Err(message) => errors.push(ManifestError {
                            origin: format!("{url} (document {})", i + 1),
                            message,
                        }),
                    }
                }
                last_body = Some(body);
                if tx
                    .send(SourceSnapshot {
                        source: "http".into(),
                        pods,
                        errors,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Ok(_) => {}
            // The source is not ready (no snapshot is claimed) until a
            // fetch succeeds; later failures keep the last snapshot.
            Err(e) => tracing::warn!(url = %url, error = %e, "manifest URL fetch failed"),
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TWO: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: c, image: i}]\n";

    #[test]
    fn multi_document_yaml_and_json_lists() {
        let pods = parse_manifest(TWO);
        assert_eq!(pods.len(), 2);
        assert!(pods.iter().all(|p| p.is_ok()));
        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}"#;
        let pods = parse_manifest(json);
        assert_eq!(pods.len(), 1);
        assert_eq!(
            pods[0].as_ref().unwrap().metadata.name.as_deref(),
            Some("x")
        );
        let bad = parse_manifest("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n");
        assert!(bad[0].as_ref().unwrap_err().contains("Deployment"));
        let broken = parse_manifest("kind: Pod\nmetadata: [\n");
        assert!(broken[0].as_ref().unwrap_err().contains("invalid YAML"));
    }

    fn snap(pods: Vec<Pod>) -> SourceSnapshot {
        SourceSnapshot {
            source: "file".into(),
            pods,
            errors: vec![],
        }
    }

    #[test]
    fn static_pods_get_stable_uids_and_node_names() {
        let p = parse_manifest(TWO).remove(0).unwrap();
        let a = make_static(p.clone(), "Node1", "file", "/m/a.yaml#0");
        let b = make_static(p.clone(), "Node1", "file", "/m/a.yaml#0");
        assert_eq!(a.metadata.uid, b.metadata.uid);
        assert_eq!(a.metadata.name.as_deref(), Some("a-node1"));
        assert_eq!(a.spec.as_ref().unwrap().node_name.as_deref(), Some("Node1"));
        let mut edited = p;
        edited.spec.as_mut().unwrap().containers[0].image = Some("j".into());
        let c = make_static(edited, "Node1", "file", "/m/a.yaml#0");
        assert_ne!(a.metadata.uid, c.metadata.uid, "an edit is a new pod");
    }

    #[test]
    fn merge_yields_add_update_delete() {
        let mut cfg = PodConfig::default();
        let mut p = parse_manifest(TWO).remove(0).unwrap();
        p.metadata.uid = Some("u1".into());
        let p = make_static(p, "n", "file", "x");
        let (u, _) = cfg.merge(snap(vec![p.clone()]));
        assert_eq!(u.iter().map(|u| u.op).collect::<Vec<_>>(), vec![Op::Add]);
        let (u, _) = cfg.merge(snap(vec![p.clone()]));
        assert!(u.is_empty());
        let mut changed = p.clone();
        changed.spec.as_mut().unwrap().containers[0].image = Some("j".into());
        let (u, _) = cfg.merge(snap(vec![changed.clone()]));
        assert_eq!(u.iter().map(|u| u.op).collect::<Vec<_>>(), vec![Op::Update]);
        let mut st = changed.clone();
        st.status = Some(Default::default());
        let (u, _) = cfg.merge(snap(vec![st]));
        assert_eq!(
            u.iter().map(|u| u.op).collect::<Vec<_>>(),
            vec![Op::Reconcile]
        );
        let (u, _) = cfg.merge(snap(vec![]));
        assert_eq!(u.iter().map(|u| u.op).collect::<Vec<_>>(), vec![Op::Delete]);
        assert!(cfg.seen_all(&["file".into()]));
        assert!(!cfg.seen_all(&["file".into(), "http".into()]));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut cfg = PodConfig::default();
        let p = parse_manifest(TWO).remove(0).unwrap();
        let a = make_static(p.clone(), "n", "file", "one");
        let b = make_static(p, "n", "file", "two");
        let (u, errs) = cfg.merge(snap(vec![a, b]));
        assert_eq!(u.len(), 1);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("defined twice"));
    }
}
