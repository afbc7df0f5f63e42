//! ListMetricDescriptors: the metrics ListPodSandboxMetrics reports, under
//! the cAdvisor names the kubelet's `/metrics/cadvisor` serves (as
//! containerd and CRI-O name them), with their label keys.
//!
//! Every descriptor listed here is emitted by `sandbox_metrics.rs` and no
//! other metric is: the table is the single list both use.

use crate::api::cri::{
    ListMetricDescriptorsRequest, ListMetricDescriptorsResponse, MetricDescriptor, MetricType,
};
use crate::server::instrument::State;
use tonic::Status;

/// Which labels a metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Labels {
    /// pod, namespace, container, id, image
    Base,
    /// … plus interface
    Network,
    /// … plus device (the writable layer's file system)
    Disk,
}

impl Labels {
    pub(super) fn keys(self) -> Vec<String> {
        let mut k: Vec<String> = ["pod", "namespace", "container", "id", "image"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        match self {
            Labels::Base => {}
            Labels::Network => k.push("interface".into()),
            Labels::Disk => k.push("device".into()),
        }
        k
    }
}

/// One metric: name, help, labels, type.
pub(super) struct Def {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: Labels,
    pub kind: MetricType,
}

const fn def(name: &'static str, help: &'static str, labels: Labels, kind: MetricType) -> Def {
    Def {
        name,
        help,
        labels,
        kind,
    }
}

use Labels::*;
use MetricType::{Counter as C, Gauge as G};

/// Every metric husk reports.
pub(super) const METRICS: &[Def] = &[
    def(
        "container_cpu_usage_seconds_total",
        "CPU time used, user and system, in whole seconds.",
        Base,
        C,
    ),
    def(
        "container_cpu_user_seconds_total",
        "CPU time used in user mode, in whole seconds.",
        Base,
        C,
    ),
    def(
        "container_cpu_system_seconds_total",
        "CPU time used in kernel mode, in whole seconds.",
        Base,
        C,
    ),
    def(
        "container_cpu_cfs_periods_total",
        "CFS enforcement periods that have elapsed.",
        Base,
        C,
    ),
    def(
        "container_cpu_cfs_throttled_periods_total",
        "CFS periods in which the container was throttled.",
        Base,
        C,
    ),
    def(
        "container_cpu_cfs_throttled_seconds_total",
        "Time the container spent throttled, in whole seconds.",
        Base,
        C,
    ),
    def(
        "container_memory_usage_bytes",
        "Memory charged to the container, page cache included.",
        Base,
        G,
    ),
    def(
        "container_memory_working_set_bytes",
        "Memory usage less inactive file pages (the kubelet's working set).",
        Base,
        G,
    ),
    def(
        "container_memory_rss",
        "Anonymous memory (RSS) of the container.",
        Base,
        G,
    ),
    def(
        "container_memory_cache",
        "Page cache charged to the container.",
        Base,
        G,
    ),
    def(
        "container_memory_mapped_file",
        "File pages mapped by the container's processes.",
        Base,
        G,
    ),
    def(
        "container_memory_total_active_file_bytes",
        "File pages on the active list.",
        Base,
        G,
    ),
    def(
        "container_memory_total_inactive_file_bytes",
        "File pages on the inactive list.",
        Base,
        G,
    ),
    def(
        "container_memory_max_usage_bytes",
        "Highest memory usage recorded.",
        Base,
        G,
    ),
    def(
        "container_memory_failcnt",
        "Times memory usage hit the limit (cgroup v1).",
        Base,
        C,
    ),
    def(
        "container_memory_swap",
        "Swap used by the container.",
        Base,
        G,
    ),
    def(
        "container_oom_events_total",
        "Processes of the container killed by the OOM killer.",
        Base,
        C,
    ),
    def(
        "container_pressure_cpu_waiting_seconds_total",
        "Time some of the container's tasks waited for CPU (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_pressure_cpu_stalled_seconds_total",
        "Time all of the container's tasks waited for CPU (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_pressure_memory_waiting_seconds_total",
        "Time some of the container's tasks waited for memory (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_pressure_memory_stalled_seconds_total",
        "Time all of the container's tasks waited for memory (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_pressure_io_waiting_seconds_total",
        "Time some of the container's tasks waited for I/O (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_pressure_io_stalled_seconds_total",
        "Time all of the container's tasks waited for I/O (PSI, cgroup v2).",
        Base,
        C,
    ),
    def(
        "container_processes",
        "Processes (tasks) in the container's cgroup.",
        Base,
        G,
    ),
    def(
        "container_fs_usage_bytes",
        "Bytes used by the container's writable layer.",
        Disk,
        G,
    ),
    def(
        "container_spec_cpu_period",
        "CFS period of the container, in microseconds.",
        Base,
        G,
    ),
    def(
        "container_spec_cpu_quota",
        "CFS quota of the container, in microseconds.",
        Base,
        G,
    ),
    def(
        "container_spec_cpu_shares",
        "CPU shares of the container.",
        Base,
        G,
    ),
    def(
        "container_spec_memory_limit_bytes",
        "Memory limit of the container.",
        Base,
        G,
    ),
    def(
        "container_start_time_seconds",
        "When the container started, in seconds since the epoch.",
        Base,
        G,
    ),
    def(
        "container_last_seen",
        "When these figures were read, in seconds since the epoch.",
        Base,
        G,
    ),
    def(
        "container_network_receive_bytes_total",
        "Bytes received by the pod on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_receive_packets_total",
        "Packets received by the pod on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_receive_packets_dropped_total",
        "Received packets dropped on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_receive_errors_total",
        "Receive errors on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_transmit_bytes_total",
        "Bytes sent by the pod on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_transmit_packets_total",
        "Packets sent by the pod on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_transmit_packets_dropped_total",
        "Sent packets dropped on an interface.",
        Network,
        C,
    ),
    def(
        "container_network_transmit_errors_total",
        "Transmit errors on an interface.",
        Network,
        C,
    ),
];

/// The definition of a metric named in METRICS.
pub(super) fn find(name: &str) -> Option<&'static Def> {
    METRICS.iter().find(|d| d.name == name)
}

pub async fn handle(
    _state: &State,
    _req: ListMetricDescriptorsRequest,
) -> Result<ListMetricDescriptorsResponse, Status> {
    Ok(ListMetricDescriptorsResponse {
        descriptors: METRICS
            .iter()
            .map(|d| MetricDescriptor {
                name: d.name.to_string(),
                help: d.help.to_string(),
                label_keys: d.labels.keys(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_cadvisor_shaped() {
        let mut names: Vec<&str> = METRICS.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
        assert!(names.iter().all(|n| n.starts_with("container_")));
        for d in METRICS.iter().filter(|d| d.kind == C) {
            assert!(
                d.name.ends_with("_total") || d.name == "container_memory_failcnt",
                "{}",
                d.name
            );
        }
        assert_eq!(find("container_processes").map(|d| d.labels), Some(Base));
    }
}
