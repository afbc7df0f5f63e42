//! ContainerStats: one container's CPU, memory and writable layer; an
//! unknown id is NotFound. Also the CRI form shared by the other stats RPCs.

use crate::api::cri::*;
use crate::cgroup::{Psi, Usage};
use crate::container::stats::ContainerUsage;
use crate::server::instrument::State;
use tonic::Status;

fn val(value: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value })
}

/// A resource's pressure in CRI form: totals in ns (the kernel's are in
/// µs), averages in percent, as cAdvisor and the peers report them.
pub(super) fn psi_of(p: &Psi) -> PsiStats {
    let data = |l: &crate::cgroup::usage::PsiLine| PsiData {
        total: l.total_us.saturating_mul(1000),
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    PsiStats {
        full: Some(data(&p.full)),
        some: Some(data(&p.some)),
    }
}

/// CPU in CRI form (None when the cgroup has no CPU figures).
pub(super) fn cpu_of(u: &Usage, nano_cores: Option<u64>) -> Option<CpuUsage> {
    let c = u.cpu?;
    Some(CpuUsage {
        timestamp: u.timestamp,
        usage_core_nano_seconds: val(c.usage_ns),
        usage_nano_cores: nano_cores.and_then(val),
        psi: u.pressure.map(|p| psi_of(&p.cpu)),
    })
}

/// IO in CRI form: its pressure, the only IO figure the CRI carries
/// (None where the kernel has none: v1, no io controller, PSI off).
pub(super) fn io_of(u: &Usage) -> Option<IoUsage> {
    let io = u.pressure?.io?;
    Some(IoUsage {
        timestamp: u.timestamp,
        psi: Some(psi_of(&io)),
    })
}

/// Memory in CRI form; available = limit − working set when limited.
pub(super) fn memory_of(u: &Usage) -> Option<MemoryUsage> {
    let m = u.memory?;
    Some(MemoryUsage {
        timestamp: u.timestamp,
        working_set_bytes: val(m.working_set),
        available_bytes: val(m
            .limit
            .map(|l| l.saturating_sub(m.working_set))
            .unwrap_or(0)),
        usage_bytes: val(m.usage),
        rss_bytes: val(m.rss),
        page_faults: val(m.page_faults),
        major_page_faults: val(m.major_page_faults),
        psi: u.pressure.and_then(|p| p.memory).map(|p| psi_of(&p)),
    })
}

/// A container's usage in CRI form.
pub(super) fn to_cri(c: &ContainerUsage) -> ContainerStats {
    let r = &c.record;
    ContainerStats {
        attributes: Some(ContainerAttributes {
            id: r.id.clone(),
            metadata: Some(ContainerMetadata {
                name: r.name.clone(),
                attempt: r.attempt,
            }),
            labels: r.labels.clone().into_iter().collect(),
            annotations: r.annotations.clone().into_iter().collect(),
        }),
        cpu: c.cgroup.as_ref().and_then(|u| cpu_of(u, c.nano_cores)),
        memory: c.cgroup.as_ref().and_then(memory_of),
        writable_layer: Some(FilesystemUsage {
            timestamp: c.writable.timestamp,
            fs_id: Some(FilesystemIdentifier {
                mountpoint: c.writable.mountpoint.display().to_string(),
            }),
            used_bytes: val(c.writable.bytes),
            inodes_used: val(c.writable.inodes),
        }),
        swap: c.cgroup.as_ref().and_then(|u| {
            let m = u.memory?;
            Some(SwapUsage {
                timestamp: u.timestamp,
                swap_available_bytes: None,
                swap_usage_bytes: val(m.swap?),
            })
        }),
        io: c.cgroup.as_ref().and_then(io_of),
    }
}

pub async fn handle(
    state: &State,
    req: ContainerStatsRequest,
) -> Result<ContainerStatsResponse, Status> {
    if req.container_id.is_empty() {
        return Err(Status::invalid_argument("container_id is required"));
    }
    let containers = state.containers()?;
    let u = tokio::task::spawn_blocking(move || containers.container_usage(&req.container_id))
        .await
        .map_err(|e| Status::internal(format!("stats task: {e}")))??;
    Ok(ContainerStatsResponse {
        stats: Some(to_cri(&u)),
    })
}
