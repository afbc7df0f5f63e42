//! The kubelet's event recorder: what happens to a pod (Pulling, Pulled,
//! Created, Started, Killing, BackOff, Unhealthy, FailedCreatePodSandBox,
//! …), as the kubelet's recorder emits it. Without an API server the
//! events are only logged (debug); with one, `apiserver::events` posts
//! them as core/v1 Events.

use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;
use tokio::sync::mpsc;

pub const NORMAL: &str = "Normal";
pub const WARNING: &str = "Warning";

/// One event about a pod, one of its containers, or the node.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// "Pod" or "Node" (whose namespace is "default" and UID its name).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.containers{NAME}` or `spec.initContainers{NAME}`; None: the pod.
    pub field_path: Option<String>,
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
}

#[derive(Default, Clone)]
pub struct Recorder {
    tx: Option<mpsc::UnboundedSender<Record>>,
}

impl Recorder {
    pub fn new(tx: mpsc::UnboundedSender<Record>) -> Recorder {
        Recorder { tx: Some(tx) }
    }

    fn send(&self, r: Record) {
        tracing::debug!(pod = %format!("{}/{}", r.namespace, r.name), object = r.field_path.as_deref().unwrap_or(""), kind = r.type_, reason = %r.reason, message = %r.message, "event");
        if let Some(tx) = &self.tx {
            let _ = tx.send(r);
        }
    }

    /// An event about the pod itself.
    pub fn pod(&self, pod: &Pod, type_: &'static str, reason: &str, message: &str) {
        self.send(record(pod, None, type_, reason, message));
    }

    /// An event about the node (image GC, OOM kills, eviction).
    pub fn node(&self, node: &str, type_: &'static str, reason: &str, message: &str) {
        self.send(Record {
            kind: "Node",
            namespace: "default".into(),
            name: node.into(),
            uid: node.into(),
            field_path: None,
            type_,
            reason: reason.into(),
            message: message.into(),
        });
    }

    /// An event about one of the pod's containers (init or app).
    pub fn container(
        &self,
        pod: &Pod,
        container: &str,
        type_: &'static str,
        reason: &str,
        message: &str,
    ) {
        let init = super::defaults::init_containers(pod)
            .iter()
            .any(|c| c.name == container);
        let field = if init {
            format!("spec.initContainers{{{container}}}")
        } else {
            format!("spec.containers{{{container}}}")
        };
        self.send(record(pod, Some(field), type_, reason, message));
    }
}

fn record(
    pod: &Pod,
    field_path: Option<String>,
    type_: &'static str,
    reason: &str,
    message: &str,
) -> Record {
    Record {
        kind: "Pod",
        namespace: super::defaults::namespace(pod).into(),
        name: super::defaults::name(pod).into(),
        uid: super::defaults::uid(pod).into(),
        field_path,
        type_,
        reason: reason.into(),
        message: message.into(),
    }
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

    #[test]
    fn container_events_name_their_field() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let r = Recorder::new(tx);
        let pod: Pod = serde_yaml::from_str("metadata: {name: p, namespace: ns, uid: u}\nspec: {initContainers: [{name: i}], containers: [{name: a}]}\n").unwrap();
        r.container(&pod, "i", NORMAL, "Pulled", "ok");
        r.container(&pod, "a", WARNING, "BackOff", "again");
        r.pod(&pod, WARNING, "FailedCreatePodSandBox", "no");
        let a = rx.try_recv().unwrap();
        assert_eq!(a.field_path.as_deref(), Some("spec.initContainers{i}"));
        assert_eq!(
            (a.namespace.as_str(), a.name.as_str(), a.uid.as_str()),
            ("ns", "p", "u")
        );
        let b = rx.try_recv().unwrap();
        assert_eq!(b.field_path.as_deref(), Some("spec.containers{a}"));
        assert_eq!(b.type_, WARNING);
        assert_eq!(rx.try_recv().unwrap().field_path, None);
        Recorder::default().pod(&pod, NORMAL, "x", "no sink: only logged");
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(human(Duration::from_secs(10)), "10s");
        assert_eq!(human(Duration::from_secs(160)), "2m40s");
        assert_eq!(human(Duration::from_secs(300)), "5m0s");
    }
}
