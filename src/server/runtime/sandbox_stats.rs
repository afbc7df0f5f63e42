//! PodSandboxStats: the pod's CPU, memory and process count (its cgroups
//! summed), its network counters per interface, and its containers' stats;
//! an unknown id is NotFound.

use super::container_stats::{cpu_of, io_of, memory_of, to_cri};
use super::sandbox_status::metadata;
use crate::api::cri::*;
use crate::container::stats::Reading;
use crate::container::stats::SandboxUsage;
use crate::network::netdev::Counters;
use crate::server::instrument::State;
use tonic::Status;

/// The interface CNI attaches the pod through.
const DEFAULT_INTERFACE: &str = "eth0";

fn iface(c: &Counters) -> NetworkInterfaceUsage {
    let v = |value| Some(UInt64Value { value });
    NetworkInterfaceUsage {
        name: c.name.clone(),
        rx_bytes: v(c.rx_bytes),
        rx_errors: v(c.rx_errors),
        tx_bytes: v(c.tx_bytes),
        tx_errors: v(c.tx_errors),
    }
}

/// A pod's usage in CRI form.
pub(super) fn to_cri_pod(s: &SandboxUsage) -> PodSandboxStats {
    let r = &s.record;
    let network = s.network.as_ref().map(|(at, ifaces)| NetworkUsage {
        timestamp: *at,
        default_interface: ifaces
            .iter()
            .find(|c| c.name == DEFAULT_INTERFACE)
            .map(iface),
        interfaces: ifaces
            .iter()
            .filter(|c| c.name != "lo")
            .map(iface)
            .collect(),
    });
    // The pod's figures are its cgroups' sums; its pressure is its own
    // cgroup's, read apart.
    let cgroup = s.cgroup.clone().map(|mut u| {
        u.pressure = s.pressure;
        u
    });
    PodSandboxStats {
        attributes: Some(PodSandboxAttributes {
            id: r.id.clone(),
            metadata: Some(metadata(r)),
            labels: r.labels.clone().into_iter().collect(),
            annotations: r.annotations.clone().into_iter().collect(),
        }),
        linux: Some(LinuxPodSandboxStats {
            cpu: cgroup.as_ref().and_then(|u| cpu_of(u, s.nano_cores)),
            memory: cgroup.as_ref().and_then(memory_of),
            io: cgroup.as_ref().and_then(io_of),
            network,
            process: s.cgroup.as_ref().and_then(|u| {
                Some(ProcessUsage {
                    timestamp: u.timestamp,
                    process_count: Some(UInt64Value { value: u.pids? }),
                })
            }),
            containers: s.containers.iter().map(to_cri).collect(),
        }),
        windows: None,
    }
}

pub async fn handle(
    state: &State,
    req: PodSandboxStatsRequest,
) -> Result<PodSandboxStatsResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    let containers = state.containers()?;
    let u = tokio::task::spawn_blocking(move || {
        containers.sandbox_usage(&req.pod_sandbox_id, Reading::Stats)
    })
    .await
    .map_err(|e| Status::internal(format!("stats task: {e}")))??;
    Ok(PodSandboxStatsResponse {
        stats: Some(to_cri_pod(&u)),
    })
}
