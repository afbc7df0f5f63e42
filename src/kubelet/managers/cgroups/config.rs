//! What the kubelet's cgroups are given, computed as the kubelet computes
//! it (`ResourceConfigForPod`, the QoS manager, node allocatable):
//!
//! - a pod: CPU shares from the sum of its requests; a CFS quota from the
//!   sum of its limits and a memory limit from the sum of its memory
//!   limits, each only when every container declares that limit (init
//!   containers count by their largest, as the scheduler counts them),
//!   plus `spec.overhead` (set from the RuntimeClass); a BestEffort pod
//!   gets the minimum shares and nothing else;
//! - the QoS cgroups: `besteffort` the minimum shares, `burstable` the
//!   shares of its pods' requests together;
//! - `kubepods`: node allocatable (capacity less kube- and system-reserved)
//!   when `pods` is enforced, the capacity's CPU shares otherwise.

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::quantity;
use k8s_openapi::api::core::v1::Pod;

pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262144;
pub const PERIOD: u64 = 100_000;
const MIN_QUOTA: i64 = 1000;

/// Limits for one cgroup; None leaves that controller as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// CFS quota per [`PERIOD`] in µs; -1: unlimited.
    pub cpu_quota: Option<i64>,
    /// Bytes; -1: unlimited.
    pub memory: Option<i64>,
    pub pids: Option<i64>,
}

/// The kubelet's MilliCPUToShares.
pub fn shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64) * 1024 / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The kubelet's MilliCPUToQuota (0: no limit).
pub fn quota(milli: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli * PERIOD as i64 / 1000).max(MIN_QUOTA)
}

/// cgroup v2's `cpu.weight` for v1 shares, as the kubelet 1.28 converts them
/// (runc 1.1's linear map; husk serve's containers follow newer runc).
pub fn weight(shares: u64) -> u64 {
    if shares == 0 {
        return 100;
    }
    1 + ((shares.clamp(MIN_SHARES, MAX_SHARES) - 2) * 9999) / 262142
}

/// Sums of a pod's requests and limits, and whether every container
/// declares a CPU / memory limit.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PodTotals {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: i64,
    pub memory_limit: i64,
    pub cpu_limited: bool,
    pub memory_limited: bool,
}

fn overhead(pod: &Pod, key: &str, milli: bool) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.overhead.as_ref())
        .and_then(|o| o.get(key))
        .and_then(|q| {
            if milli {
                quantity::milli_value(&q.0).ok()
            } else {
                quantity::value(&q.0).ok()
            }
        })
        .unwrap_or(0)
}

/// Max of (sum of app containers, largest init container), plus overhead.
pub fn totals(pod: &Pod) -> PodTotals {
    let apps = defaults::containers(pod);
    let inits = defaults::init_containers(pod);
    let (mut req, mut lim, mut mem) = (0i64, 0i64, 0i64);
    let (mut cpu_limited, mut memory_limited) = (true, true);
    for c in apps {
        let r = defaults::resources(c);
        req += r.cpu_request_milli.unwrap_or(0);
        lim += r.cpu_limit_milli.unwrap_or(0);
        mem += r.memory_limit.unwrap_or(0);
        cpu_limited &= r.cpu_limit_milli.is_some_and(|v| v > 0);
        memory_limited &= r.memory_limit.is_some_and(|v| v > 0);
    }
    for c in inits {
        let r = defaults::resources(c);
        req = req.max(r.cpu_request_milli.unwrap_or(0));
        lim = lim.max(r.cpu_limit_milli.unwrap_or(0));
        mem = mem.max(r.memory_limit.unwrap_or(0));
        cpu_limited &= r.cpu_limit_milli.is_some_and(|v| v > 0);
        memory_limited &= r.memory_limit.is_some_and(|v| v > 0);
    }
    PodTotals {
        cpu_request_milli: req + overhead(pod, "cpu", true),
        cpu_limit_milli: lim + overhead(pod, "cpu", true),
        memory_limit: mem + overhead(pod, "memory", false),
        cpu_limited: cpu_limited && !(apps.is_empty() && inits.is_empty()),
        memory_limited: memory_limited && !(apps.is_empty() && inits.is_empty()),
    }
}

/// The pod cgroup's limits (`ResourceConfigForPod`).
pub fn for_pod(pod: &Pod, pod_pids_limit: Option<i64>) -> ResourceConfig {
    let t = totals(pod);
    let mut r = ResourceConfig {
        pids: pod_pids_limit,
        ..Default::default()
    };
    match defaults::qos_class(pod) {
        "Guaranteed" => {
            r.cpu_shares = Some(shares(t.cpu_request_milli));
            r.cpu_quota = Some(quota(t.cpu_limit_milli));
            r.memory = Some(t.memory_limit);
        }
        "Burstable" => {
            r.cpu_shares = Some(shares(t.cpu_request_milli));
            r.cpu_quota = Some(if t.cpu_limited {
                quota(t.cpu_limit_milli)
            } else {
                -1
            });
            r.memory = Some(if t.memory_limited { t.memory_limit } else { -1 });
        }
        _ => {
            r.cpu_shares = Some(MIN_SHARES);
            r.cpu_quota = Some(-1);
            r.memory = Some(-1);
        }
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let mut p: Pod =
            serde_yaml::from_str(&format!("metadata: {{name: p, uid: u}}\nspec:\n{spec}")).unwrap();
        defaults::apply(&mut p);
        p
    }

    #[test]
    fn conversions_match_the_kubelets() {
        assert_eq!(shares(0), 2);
        assert_eq!(shares(1), 2);
        assert_eq!(shares(100), 102);
        assert_eq!(shares(1000), 1024);
        assert_eq!(shares(1_000_000), MAX_SHARES);
        assert_eq!(quota(0), 0);
        assert_eq!(quota(5), 1000);
        assert_eq!(quota(250), 25_000);
        assert_eq!(weight(2), 1);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(MAX_SHARES), 10000);
    }

    #[test]
    fn guaranteed_pods_sum_their_containers() {
        let p = pod("  containers:\n  - {name: a, image: i, resources: {limits: {cpu: 250m, memory: 32Mi}}}\n  - {name: b, image: i, resources: {limits: {cpu: 250m, memory: 32Mi}}}\n");
        let r = for_pod(&p, None);
        assert_eq!(r.cpu_shares, Some(512));
        assert_eq!(r.cpu_quota, Some(50_000));
        assert_eq!(r.memory, Some(64 << 20));
    }

    #[test]
    fn burstable_limits_only_when_every_container_has_one() {
        let p = pod("  containers:\n  - {name: a, image: i, resources: {requests: {cpu: 100m}, limits: {memory: 32Mi}}}\n  - {name: b, image: i}\n");
        let r = for_pod(&p, Some(100));
        assert_eq!(r.cpu_shares, Some(102));
        assert_eq!(r.cpu_quota, Some(-1));
        assert_eq!(r.memory, Some(-1));
        assert_eq!(r.pids, Some(100));
        let p = pod("  initContainers:\n  - {name: i, image: i, resources: {limits: {memory: 100Mi}}}\n  containers:\n  - {name: a, image: i, resources: {requests: {memory: 10Mi}, limits: {memory: 40Mi}}}\n  - {name: b, image: i, resources: {limits: {memory: 40Mi}}}\n");
        assert_eq!(
            for_pod(&p, None).memory,
            Some(100 << 20),
            "the largest init container wins"
        );
    }

    #[test]
    fn overhead_is_added_and_best_effort_gets_the_minimum() {
        let p = pod("  overhead: {cpu: 100m, memory: 16Mi}\n  containers:\n  - {name: a, image: i, resources: {limits: {cpu: 100m, memory: 16Mi}}}\n");
        let r = for_pod(&p, None);
        assert_eq!(r.memory, Some(32 << 20));
        assert_eq!(r.cpu_quota, Some(20_000));
        let be = for_pod(&pod("  containers: [{name: a, image: i}]\n"), None);
        assert_eq!((be.cpu_shares, be.memory), (Some(2), Some(-1)));
    }
}
