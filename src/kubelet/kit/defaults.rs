//! API defaults applied to every pod (as the API server, or the kubelet
//! for static pods, would apply them), and small accessors over the
//! k8s-openapi types that the rest of the kubelet shares.
//!
//! Invariant: everything downstream (hashing, admission, sync) sees a
//! defaulted pod, so `restart_policy()`, `pull_policy()` etc. never guess.

use super::quantity;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
pub const DEFAULT_GRACE_PERIOD: i64 = 30;

/// Fills the fields the API server would default.
pub fn apply(pod: &mut Pod) {
    let ns = pod.metadata.namespace.get_or_insert_with(String::new);
    if ns.is_empty() {
        *ns = "default".into();
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_GRACE_PERIOD);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    let inits = spec.init_containers.iter_mut().flatten();
    for c in spec.containers.iter_mut().chain(inits) {
        default_container(c);
    }
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(hp) = v.host_path.as_mut() {
            hp.type_.get_or_insert_with(String::new);
        }
    }
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.is_none() {
        c.image_pull_policy = Some(default_pull_policy(c.image.as_deref().unwrap_or("")).into());
    }
    c.termination_message_path
        .get_or_insert_with(|| DEFAULT_TERMINATION_MESSAGE_PATH.into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
    for p in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        default_probe(p);
    }
    // Requests default to limits, resource by resource.
    if let Some(r) = c.resources.as_mut() {
        if let Some(limits) = r.limits.clone() {
            let req = r.requests.get_or_insert_with(BTreeMap::new);
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    p.initial_delay_seconds.get_or_insert(0);
    if let Some(h) = p.http_get.as_mut() {
        h.path.get_or_insert_with(|| "/".into());
        h.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

/// Always for `:latest` or no tag (and no digest), IfNotPresent otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => "Always",
        Some(_) => "IfNotPresent",
        None if digest => "IfNotPresent",
        None => "Always",
    }
}

/// Now, as an API time.
pub fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let ns = super::backoff::now_ns() as i128;
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_nanosecond(ns)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// `namespace/name`, as the kubelet's logs name pods.
/// One of the pod's annotations.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|s| s.as_str())
}

pub fn full_name(pod: &Pod) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// The grace period to stop the pod with: the deletion's own
/// (`metadata.deletionGracePeriodSeconds`, set by the API server) first.
pub fn grace_period(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_GRACE_PERIOD)
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

pub fn containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[])
}

pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// A stable hash of a container's spec (the container-hash annotation):
/// a changed spec means the container is replaced.
pub fn container_hash(c: &Container) -> String {
    let json = serde_json::to_vec(c).unwrap_or_default();
    let d = Sha256::digest(&json);
    hex::encode(&d[..8])
}

fn resource(map: Option<&BTreeMap<String, Quantity>>, key: &str) -> Option<String> {
    map.and_then(|m| m.get(key)).map(|q| q.0.clone())
}

/// A container's CPU/memory requests and limits, parsed (invalid values
/// are admission errors, so here they read as absent).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Resources {
    pub cpu_request_milli: Option<i64>,
    pub cpu_limit_milli: Option<i64>,
    pub memory_request: Option<i64>,
    pub memory_limit: Option<i64>,
}

pub fn resources(c: &Container) -> Resources {
    let r = c.resources.as_ref();
    let req = r.and_then(|r| r.requests.as_ref());
    let lim = r.and_then(|r| r.limits.as_ref());
    let milli = |m, k| resource(m, k).and_then(|q| quantity::milli_value(&q).ok());
    let val = |m, k| resource(m, k).and_then(|q| quantity::value(&q).ok());
    Resources {
        cpu_request_milli: milli(req, "cpu"),
        cpu_limit_milli: milli(lim, "cpu"),
        memory_request: val(req, "memory"),
        memory_limit: val(lim, "memory"),
    }
}

/// The pod's QoS class, computed as the kubelet does.
pub fn qos_class(pod: &Pod) -> &'static str {
    let all: Vec<&Container> = containers(pod).iter().chain(init_containers(pod)).collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let r = resources(c);
        if r.cpu_request_milli.is_some()
            || r.cpu_limit_milli.is_some()
            || r.memory_request.is_some()
            || r.memory_limit.is_some()
        {
            any = true;
        }
        let cpu_ok = r.cpu_limit_milli.is_some() && r.cpu_request_milli == r.cpu_limit_milli;
        let mem_ok = r.memory_limit.is_some() && r.memory_request == r.memory_limit;
        if !(cpu_ok && mem_ok) {
            guaranteed = false;
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_defaults_follow_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("127.0.0.1:5000/a/b"), "Always");
        assert_eq!(
            default_pull_policy("127.0.0.1:5000/a/b:1.0"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("a/b@sha256:abcd"), "IfNotPresent");
        assert_eq!(default_pull_policy("a/b:latest@sha256:abcd"), "Always");
    }

    fn pod(yaml: &str) -> Pod {
        let mut p: Pod = serde_yaml::from_str(yaml).unwrap();
        apply(&mut p);
        p
    }

    #[test]
    fn qos_classes() {
        let be = pod("metadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n");
        assert_eq!(qos_class(&be), "BestEffort");
        let g = pod("metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {limits: {cpu: 100m, memory: 64Mi}}\n");
        assert_eq!(qos_class(&g), "Guaranteed", "requests default to limits");
        let b = pod("metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {requests: {cpu: 100m}}\n");
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn hash_changes_with_the_spec() {
        let a = pod("metadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n");
        let b = pod("metadata: {name: a}\nspec:\n  containers: [{name: c, image: j}]\n");
        assert_eq!(
            container_hash(&a.spec.as_ref().unwrap().containers[0]),
            container_hash(&a.spec.as_ref().unwrap().containers[0])
        );
        assert_ne!(
            container_hash(&a.spec.as_ref().unwrap().containers[0]),
            container_hash(&b.spec.as_ref().unwrap().containers[0])
        );
        assert_eq!(namespace(&a), "default");
        assert_eq!(restart_policy(&a), "Always");
    }
}
