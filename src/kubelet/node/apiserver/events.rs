//! Events to the API server: each [`Record`] becomes a core/v1 Event named
//! `<pod>.<hex nanoseconds>` (as the kubelet names them), from component
//! `kubelet` on this host. A repeat of the same event (pod, object, reason,
//! message) within 10 minutes bumps the first one's `count` and
//! `lastTimestamp` instead, as the kubelet's correlator does. At most 1000
//! events wait while the API server is unreachable; older ones are dropped.

use super::Reporter;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::recorder::Record;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const QUEUE: usize = 1000;
const AGGREGATE_FOR: Duration = Duration::from_secs(600);

/// The Event first posted for a record.
pub fn event(r: &Record, node: &str) -> Event {
    let now = defaults::now();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", r.name, now.0.as_nanosecond())),
            namespace: Some(r.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(r.kind.into()),
            namespace: (r.kind == "Pod").then(|| r.namespace.clone()),
            name: Some(r.name.clone()),
            uid: Some(r.uid.clone()),
            field_path: r.field_path.clone(),
            ..Default::default()
        },
        reason: Some(r.reason.clone()),
        message: Some(r.message.clone()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(node.into()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        type_: Some(r.type_.into()),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.into()),
        ..Default::default()
    }
}

type Key = (String, Option<String>, String, String);

fn key(r: &Record) -> Key {
    (
        r.uid.clone(),
        r.field_path.clone(),
        r.reason.clone(),
        r.message.clone(),
    )
}

/// The task: runs until `rx` closes.
pub async fn run(client: kube::Client, node: String, mut rx: mpsc::UnboundedReceiver<Record>) {
    let mut queue: VecDeque<Record> = VecDeque::new();
    // Posted events: key → (namespace, event name, count, when).
    let mut seen: HashMap<Key, (String, String, i32, Instant)> = HashMap::new();
    let mut rep = Reporter::new("events");
    let mut retry = super::Retry::default();
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some(r) => queue.push_back(r),
                None => return,
            }
        }
        while let Ok(r) = rx.try_recv() {
            queue.push_back(r);
        }
        while queue.len() > QUEUE {
            queue.pop_front();
        }
        let Some(r) = queue.front().cloned() else {
            continue;
        };
        seen.retain(|_, v| v.3.elapsed() < AGGREGATE_FOR);
        let k = key(&r);
        let result = match seen.get(&k).cloned() {
            Some((ns, name, count, _)) => {
                let patch =
                    serde_json::json!({"count": count + 1, "lastTimestamp": defaults::now()});
                Api::<Event>::namespaced(client.clone(), &ns)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| (ns, name, count + 1))
            }
            None => {
                let ev = event(&r, &node);
                Api::<Event>::namespaced(client.clone(), &r.namespace)
                    .create(&PostParams::default(), &ev)
                    .await
                    .map(|e| (r.namespace.clone(), e.metadata.name.unwrap_or_default(), 1))
            }
        };
        match result {
            Ok((ns, name, count)) => {
                rep.ok();
                retry.reset();
                queue.pop_front();
                seen.insert(k, (ns, name, count, Instant::now()));
            }
            // The aggregated event is gone: post it anew.
            Err(e) if super::code(&e) == Some(404) && seen.contains_key(&k) => {
                seen.remove(&k);
            }
            // A namespace being deleted, or a rejected event: dropped.
            Err(e) if matches!(super::code(&e), Some(400..=499)) => {
                tracing::debug!(error = %e, reason = %r.reason, "event dropped");
                queue.pop_front();
            }
            Err(e) => {
                rep.failed(&super::describe(&e));
                tokio::time::sleep(retry.delay()).await;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn events_are_named_and_sourced_like_the_kubelet() {
        let r = Record {
            kind: "Pod",
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u".into(),
            field_path: Some("spec.containers{c}".into()),
            type_: "Normal",
            reason: "Pulled".into(),
            message: "done".into(),
        };
        let e = event(&r, "n1");
        assert!(e.metadata.name.as_ref().unwrap().starts_with("web."));
        assert_eq!(e.involved_object.uid.as_deref(), Some("u"));
        assert_eq!(
            e.involved_object.field_path.as_deref(),
            Some("spec.containers{c}")
        );
        assert_eq!(
            e.source.as_ref().unwrap().component.as_deref(),
            Some("kubelet")
        );
        assert_eq!(e.source.unwrap().host.as_deref(), Some("n1"));
        assert_eq!(e.count, Some(1));
        assert_eq!(key(&r), key(&r.clone()));
    }
}
