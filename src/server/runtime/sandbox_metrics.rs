//! ListPodSandboxMetrics: for every ready pod, its network counters per
//! interface (pod level: container and image labels empty, id = the pod's
//! id) and each container's CPU, memory, process, writable-layer, limit
//! and time metrics, as listed by ListMetricDescriptors.
//!
//! Values are the CRI's unsigned integers: second totals are whole seconds
//! (as containerd reports them). Reading does not touch the CPU rate
//! samples of the stats RPCs.

use super::metric_descriptors::find;
use crate::api::cri::*;
use crate::container::stats::{ContainerUsage, Reading, SandboxUsage};
use crate::server::instrument::State;
use tonic::Status;

const NS_PER_S: u64 = 1_000_000_000;

/// Collects metrics sharing a label prefix and timestamp.
struct Out<'a> {
    labels: &'a [String],
    at: i64,
    metrics: Vec<Metric>,
}

impl Out<'_> {
    /// Adds `name` (which must be in METRICS) with `extra` label values.
    fn push(&mut self, name: &str, extra: &[&str], value: u64) {
        let Some(d) = find(name) else {
            tracing::error!(metric = name, "metric missing from the descriptor table");
            return;
        };
        let mut label_values = self.labels.to_vec();
        label_values.extend(extra.iter().map(|s| s.to_string()));
        self.metrics.push(Metric {
            name: d.name.to_string(),
            timestamp: self.at,
            metric_type: d.kind as i32,
            label_values,
            value: Some(UInt64Value { value }),
        });
    }

    fn opt(&mut self, name: &str, value: Option<u64>) {
        if let Some(v) = value {
            self.push(name, &[], v);
        }
    }
}

fn container_metrics(
    pod: &[String],
    c: &ContainerUsage,
    cfg: Option<ContainerConfig>,
) -> ContainerMetrics {
    let r = &c.record;
    let mut labels = pod.to_vec();
    labels.extend([r.name.clone(), r.id.clone(), r.image.clone()]);
    let at = crate::sys::now_ns();
    let mut o = Out {
        labels: &labels,
        at,
        metrics: Vec::new(),
    };
    if let Some(u) = &c.cgroup {
        if let Some(cpu) = u.cpu {
            o.push(
                "container_cpu_usage_seconds_total",
                &[],
                cpu.usage_ns / NS_PER_S,
            );
            o.opt(
                "container_cpu_user_seconds_total",
                cpu.user_ns.map(|v| v / NS_PER_S),
            );
            o.opt(
                "container_cpu_system_seconds_total",
                cpu.system_ns.map(|v| v / NS_PER_S),
            );
            o.opt("container_cpu_cfs_periods_total", cpu.periods);
            o.opt(
                "container_cpu_cfs_throttled_periods_total",
                cpu.throttled_periods,
            );
            o.opt(
                "container_cpu_cfs_throttled_seconds_total",
                cpu.throttled_ns.map(|v| v / NS_PER_S),
            );
        }
        if let Some(m) = u.memory {
            o.push("container_memory_usage_bytes", &[], m.usage);
            o.push("container_memory_working_set_bytes", &[], m.working_set);
            o.push("container_memory_rss", &[], m.rss);
            o.push("container_memory_cache", &[], m.cache);
            o.push("container_memory_mapped_file", &[], m.mapped_file);
            o.push(
                "container_memory_total_active_file_bytes",
                &[],
                m.active_file,
            );
            o.push(
                "container_memory_total_inactive_file_bytes",
                &[],
                m.inactive_file,
            );
            o.opt("container_memory_max_usage_bytes", m.max_usage);
            o.opt("container_memory_failcnt", m.failcnt);
            o.opt("container_memory_swap", m.swap);
            o.opt("container_oom_events_total", m.oom_kills);
        }
        o.opt("container_processes", u.pids);
        if let Some(p) = u.pressure {
            let s = |us: u64| us / 1_000_000;
            let none = crate::cgroup::usage::Psi::default();
            for (name, psi) in [
                ("cpu", p.cpu),
                ("memory", p.memory.unwrap_or(none)),
                ("io", p.io.unwrap_or(none)),
            ] {
                o.push(
                    &format!("container_pressure_{name}_waiting_seconds_total"),
                    &[],
                    s(psi.some.total_us),
                );
                o.push(
                    &format!("container_pressure_{name}_stalled_seconds_total"),
                    &[],
                    s(psi.full.total_us),
                );
            }
        }
    }
    let device = c.writable.mountpoint.display().to_string();
    o.push("container_fs_usage_bytes", &[&device], c.writable.bytes);
    let res = cfg
        .and_then(|c| c.linux)
        .and_then(|l| l.resources)
        .unwrap_or_default();
    let pos = |v: i64| (v > 0).then_some(v as u64);
    o.opt("container_spec_cpu_period", pos(res.cpu_period));
    o.opt("container_spec_cpu_quota", pos(res.cpu_quota));
    o.opt("container_spec_cpu_shares", pos(res.cpu_shares));
    o.opt(
        "container_spec_memory_limit_bytes",
        pos(res.memory_limit_in_bytes),
    );
    if r.started_at > 0 {
        o.push(
            "container_start_time_seconds",
            &[],
            r.started_at as u64 / NS_PER_S,
        );
    }
    o.push("container_last_seen", &[], at.max(0) as u64 / NS_PER_S);
    ContainerMetrics {
        container_id: r.id.clone(),
        metrics: o.metrics,
    }
}

pub(super) fn pod_metrics(
    s: &SandboxUsage,
    cfg_of: impl Fn(&str) -> Option<ContainerConfig>,
) -> PodSandboxMetrics {
    let r = &s.record;
    let pod = vec![r.name.clone(), r.namespace.clone()];
    let labels = [
        pod.clone(),
        vec![String::new(), r.id.clone(), String::new()],
    ]
    .concat();
    let mut o = Out {
        labels: &labels,
        at: crate::sys::now_ns(),
        metrics: Vec::new(),
    };
    if let Some((at, ifaces)) = &s.network {
        o.at = *at;
        for c in ifaces.iter().filter(|c| c.name != "lo") {
            let i = [c.name.as_str()];
            o.push("container_network_receive_bytes_total", &i, c.rx_bytes);
            o.push("container_network_receive_packets_total", &i, c.rx_packets);
            o.push(
                "container_network_receive_packets_dropped_total",
                &i,
                c.rx_dropped,
            );
            o.push("container_network_receive_errors_total", &i, c.rx_errors);
            o.push("container_network_transmit_bytes_total", &i, c.tx_bytes);
            o.push("container_network_transmit_packets_total", &i, c.tx_packets);
            o.push(
                "container_network_transmit_packets_dropped_total",
                &i,
                c.tx_dropped,
            );
            o.push("container_network_transmit_errors_total", &i, c.tx_errors);
        }
    }
    PodSandboxMetrics {
        pod_sandbox_id: r.id.clone(),
        metrics: o.metrics,
        container_metrics: s
            .containers
            .iter()
            .map(|c| container_metrics(&pod, c, cfg_of(&c.record.id)))
            .collect(),
    }
}

pub async fn handle(
    state: &State,
    _req: ListPodSandboxMetricsRequest,
) -> Result<ListPodSandboxMetricsResponse, Status> {
    let containers = state.containers()?;
    let pod_metrics = tokio::task::spawn_blocking(move || {
        containers
            .sandbox_usages(|_| true, Reading::Metrics)
            .iter()
            .map(|s| pod_metrics(s, |id| containers.saved_config(id)))
            .collect()
    })
    .await
    .map_err(|e| Status::internal(format!("metrics task: {e}")))?;
    Ok(ListPodSandboxMetricsResponse { pod_metrics })
}
