//! Which pod goes first, as the kubelet ranks them for a starved resource:
//! pods whose usage exceeds their requests before those within them, then
//! lower priority first, then lower QoS class (BestEffort, Burstable,
//! Guaranteed), then the larger usage above requests. For PIDs, priority
//! and QoS alone. Critical pods (static and mirror pods, priority of
//! 2000000000 and above) are never evicted.

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::kit::node_config::Signal;
use crate::kubelet::kit::quantity;
use k8s_openapi::api::core::v1::Pod;
use std::cmp::Reverse;
use std::sync::Arc;

/// The priority from which pods are critical (system-cluster-critical).
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// A pod that may be evicted, with its usage of the starved resource.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pod: Arc<Pod>,
    pub usage: i64,
}

pub fn is_critical(pod: &Pod) -> bool {
    let source = defaults::annotation(pod, labels::CONFIG_SOURCE);
    let static_pod = source.is_some_and(|s| s != "api");
    let mirror = defaults::annotation(pod, labels::CONFIG_MIRROR).is_some();
    static_pod || mirror || priority(pod) >= CRITICAL_PRIORITY
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn qos_rank(pod: &Pod) -> u8 {
    match defaults::qos_class(pod) {
        "BestEffort" => 0,
        "Burstable" => 1,
        _ => 2,
    }
}

/// The pod's requests of the resource a signal starves.
pub fn requests(pod: &Pod, signal: Signal) -> i64 {
    match signal {
        Signal::MemoryAvailable => defaults::containers(pod)
            .iter()
            .map(|c| defaults::resources(c).memory_request.unwrap_or(0))
            .sum(),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => defaults::containers(pod)
            .iter()
            .filter_map(|c| {
                c.resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("ephemeral-storage")
                    .and_then(|q| quantity::value(&q.0).ok())
            })
            .sum(),
        _ => 0,
    }
}

/// Orders `pods` so the first is evicted first (critical pods dropped).
pub fn rank(signal: Signal, pods: &mut Vec<Candidate>) {
    pods.retain(|c| !is_critical(&c.pod));
    let by_usage = !matches!(signal, Signal::PidAvailable);
    pods.sort_by_key(|c| {
        let above = c.usage - requests(&c.pod, signal);
        (
            Reverse(by_usage && above > 0),
            priority(&c.pod),
            qos_rank(&c.pod),
            Reverse(if by_usage { above } else { 0 }),
        )
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cand(name: &str, extra: &str, usage: i64) -> Candidate {
        let mut p: Pod = serde_yaml::from_str(&format!(
            "metadata: {{name: {name}, uid: {name}, annotations: {{kubernetes.io/config.source: api}}}}\nspec:\n{extra}"
        ))
        .unwrap();
        defaults::apply(&mut p);
        Candidate {
            pod: Arc::new(p),
            usage,
        }
    }

    fn names(v: &[Candidate]) -> Vec<&str> {
        v.iter().map(|c| defaults::name(&c.pod)).collect()
    }

    #[test]
    fn best_effort_and_low_priority_go_first() {
        let g =
            "  containers: [{name: c, image: i, resources: {limits: {cpu: 100m, memory: 64Mi}}}]\n";
        let b = "  containers: [{name: c, image: i, resources: {requests: {memory: 32Mi}}}]\n";
        let be = "  containers: [{name: c, image: i}]\n";
        let mut v = vec![
            cand("guaranteed", g, 10 << 20),
            cand("burstable", b, 10 << 20),
            cand("besteffort", be, 1 << 20),
            cand("burstable-over", b, 100 << 20),
        ];
        rank(Signal::MemoryAvailable, &mut v);
        assert_eq!(
            names(&v),
            ["besteffort", "burstable-over", "burstable", "guaranteed"]
        );
        let mut v = vec![
            cand("low", &format!("  priority: -5\n{be}"), 1),
            cand("high", &format!("  priority: 100\n{be}"), 1000),
        ];
        rank(Signal::MemoryAvailable, &mut v);
        assert_eq!(names(&v), ["low", "high"]);
        let mut v = vec![cand("g", g, 0), cand("be", be, 0)];
        rank(Signal::PidAvailable, &mut v);
        assert_eq!(names(&v), ["be", "g"]);
    }

    #[test]
    fn critical_pods_are_never_candidates() {
        let mut st = cand("static", "  containers: [{name: c, image: i}]\n", 1 << 30);
        Arc::make_mut(&mut st.pod)
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(labels::CONFIG_SOURCE.into(), "file".into());
        let crit = cand(
            "crit",
            &format!("  priority: {CRITICAL_PRIORITY}\n  containers: [{{name: c, image: i}}]\n"),
            1 << 30,
        );
        let mut v = vec![
            st,
            crit,
            cand("plain", "  containers: [{name: c, image: i}]\n", 1),
        ];
        rank(Signal::MemoryAvailable, &mut v);
        assert_eq!(names(&v), ["plain"]);
    }
}
