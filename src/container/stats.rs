//! Resource usage of containers and pods, as the stats RPCs report it.
//!
//! - A container: its cgroup (`cgroups.rs`: CPU, memory, pids; a shim v2
//!   runtime's container: what its shim's Stats reports) and its
//!   writable layer (bytes and inodes under its overlay `upper/`, walked
//!   at most once a period: `layer_usage.rs`).
//! - A pod: the sum of its own cgroups (the pause's and each container's;
//!   pods may share a cgroup parent, so the parent is not read), the
//!   traffic counters of its network namespace, and its containers.
//!
//! `usage_nano_cores` is a rate, so it needs two samples: each read keeps
//! the latest (usage, time) per container or pod, and the next read divides
//! the difference by the time between them (as containerd and cAdvisor
//! do). The first read of something leaves it unset. Samples of containers
//! and pods that no longer exist are dropped on the next list. Readers that
//! do not report the rate (the metrics RPC) read as `Reading::Metrics` and
//! leave the samples alone, so they do not shorten the stats callers'
//! interval; they read every figure, the stats callers only the CRI's.
//!
//! Everything here does blocking file I/O (and, for the network, joins a
//! namespace on its own thread); callers run it on a blocking thread.

use super::manager::ContainerManager;
use super::record::ContainerRecord;
use crate::cgroup::{self as cgroups, Figures, Layout, Usage};
use crate::network::netdev::{self, Counters};
use crate::sandbox::manager::{SandboxRecord, SandboxState};
use crate::sandbox::SandboxError;
use std::collections::HashMap;
use std::path::PathBuf;

/// Who reads, and so what is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The stats RPCs: the figures the CRI carries; the CPU rate sampled.
    Stats,
    /// The metrics RPCs and the server's own checks: every figure; the
    /// CPU samples left alone.
    Metrics,
}

impl Reading {
    fn figures(self) -> Figures {
        match self {
            Reading::Stats => Figures::Cri,
            Reading::Metrics => Figures::All,
        }
    }
}

/// Bytes and inodes of a writable layer.
#[derive(Debug, Clone)]
pub struct LayerUsage {
    pub timestamp: i64,
    pub mountpoint: PathBuf,
    pub bytes: u64,
    pub inodes: u64,
}

/// One container's usage.
#[derive(Debug, Clone)]
pub struct ContainerUsage {
    pub record: ContainerRecord,
    /// None when its cgroup does not exist (yet or any more).
    pub cgroup: Option<Usage>,
    pub nano_cores: Option<u64>,
    pub writable: LayerUsage,
}

/// One pod's usage.
#[derive(Debug, Clone)]
pub struct SandboxUsage {
    pub record: SandboxRecord,
    pub cgroup: Option<Usage>,
    pub nano_cores: Option<u64>,
    /// When the counters were read, and each interface's.
    pub network: Option<(i64, Vec<Counters>)>,
    pub containers: Vec<ContainerUsage>,
    /// The pod cgroup's own pressure (v2, a pod with a cgroup parent):
    /// stall times of its cgroups overlap and cannot be summed.
    pub pressure: Option<crate::cgroup::Pressure>,
}

/// Sample keys of pods, apart from container ids.
fn pod_key(id: &str) -> String {
    format!("pod/{id}")
}

impl ContainerManager {
    fn usage_of(&self, layout: &Layout, r: ContainerRecord, reading: Reading) -> ContainerUsage {
        let cgroup = if self.under_shim(&r.sandbox_id) {
            self.shim_usage(&r)
        } else {
            cgroups::usage(layout, &r.cgroups_path, reading.figures())
        };
        let nano_cores = cgroup
            .as_ref()
            .filter(|_| reading == Reading::Stats)
            .and_then(|u| Some((u.cpu?.usage_ns, u.timestamp)))
            .and_then(|(ns, at)| self.cpu_samples.rate(&r.id, ns, at));
        let walked = self.layer_usage.get(
            &r.id,
            &self.dir(&r.id).join("upper"),
            super::layer_usage::PERIOD,
        );
        ContainerUsage {
            writable: LayerUsage {
                timestamp: walked.at_ns,
                mountpoint: self.images.fs_mountpoint(),
                bytes: walked.bytes,
                inodes: walked.inodes,
            },
            record: r,
            cgroup,
            nano_cores,
        }
    }

    /// A shim v2 runtime's container's usage, as its shim's Stats reports
    /// it (None when the shim cannot tell: the container is not running).
    fn shim_usage(&self, r: &ContainerRecord) -> Option<cgroups::Usage> {
        let resp = super::manager::shim_call(
            &self.sandboxes.shim_dir(&r.sandbox_id),
            crate::api::shim::shim_request::Request::Stats(crate::api::shim::StatsRequest {
                id: r.id.clone(),
            }),
        )
        .ok()?;
        crate::shim::v2::metrics::decode(&resp.stats_type, &resp.stats, crate::sys::now_ns())
    }

    /// Whether the pod `sandbox_id` runs under a shim v2 runtime.
    pub(super) fn under_shim(&self, sandbox_id: &str) -> bool {
        self.sandboxes
            .get(sandbox_id)
            .and_then(|p| {
                self.sandboxes
                    .handlers()
                    .get(&p.runtime_handler)
                    .ok()
                    .map(|h| h.is_shim())
            })
            .unwrap_or(false)
    }

    /// ContainerStats: one container by id (or unique prefix).
    pub fn container_usage(&self, id: &str) -> Result<ContainerUsage, SandboxError> {
        let r = self
            .resolve(id)
            .and_then(|i| self.get(&i))
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        Ok(self.usage_of(Layout::host(), r, Reading::Stats))
    }

    /// One container's figures, its CPU rate sampled (a Stream* RPC's
    /// item).
    pub fn usage(&self, r: ContainerRecord) -> ContainerUsage {
        self.usage_of(Layout::host(), r, Reading::Stats)
    }

    /// ListContainerStats: every container `keep` accepts.
    pub fn container_usages(&self, keep: impl Fn(&ContainerRecord) -> bool) -> Vec<ContainerUsage> {
        let mut recs: Vec<ContainerRecord> = self.lock().0.values().cloned().collect();
        self.forget_gone_samples();
        recs.retain(|r| keep(r));
        recs.sort_by_key(|r| r.created_at);
        recs.into_iter()
            .map(|r| self.usage_of(Layout::host(), r, Reading::Stats))
            .collect()
    }

    fn forget_gone_samples(&self) {
        let live: std::collections::HashSet<String> = self
            .lock()
            .0
            .keys()
            .cloned()
            .chain(self.sandboxes.list_ids().into_iter().map(|s| pod_key(&s)))
            .collect();
        self.cpu_samples.retain(|k| live.contains(k));
        self.layer_usage.retain(|k| live.contains(k));
    }

    /// PodSandboxStats: the pod's cgroups summed, its network, its
    /// containers.
    pub fn sandbox_usage(
        &self,
        sandbox_id: &str,
        reading: Reading,
    ) -> Result<SandboxUsage, SandboxError> {
        let rec = self
            .sandboxes
            .resolve(sandbox_id)
            .and_then(|i| self.sandboxes.get(&i))
            .ok_or_else(|| SandboxError::NotFound(format!("pod sandbox {sandbox_id} not found")))?;
        let containers: Vec<ContainerRecord> = self
            .lock()
            .0
            .values()
            .filter(|r| r.sandbox_id == rec.id)
            .cloned()
            .collect();
        let network = pinned_netns(&rec).map(|ns| netdev::read(&ns));
        Ok(self.pod_usage(rec, containers, network, reading))
    }

    /// A pod's usage, from its record, its containers' records and what
    /// reading its network counters gave (None for a pod without a
    /// network of its own, or not ready).
    fn pod_usage(
        &self,
        rec: SandboxRecord,
        mut containers: Vec<ContainerRecord>,
        network: Option<std::io::Result<Vec<Counters>>>,
        reading: Reading,
    ) -> SandboxUsage {
        let layout = Layout::host();
        containers.sort_by_key(|r| r.created_at);
        let containers: Vec<ContainerUsage> = containers
            .into_iter()
            .map(|r| self.usage_of(layout, r, reading))
            .collect();
        let mut total = cgroups::usage(layout, &rec.cgroups_path, reading.figures());
        for c in &containers {
            if let Some(u) = &c.cgroup {
                match &mut total {
                    Some(t) => t.add(u),
                    None => total = Some(u.clone()),
                }
            }
        }
        let nano_cores = total
            .as_ref()
            .filter(|_| reading == Reading::Stats)
            .and_then(|u| Some((u.cpu?.usage_ns, u.timestamp)))
            .and_then(|(ns, at)| self.cpu_samples.rate(&pod_key(&rec.id), ns, at));
        let network = network.and_then(|read| match read {
            Ok(v) => Some((crate::sys::now_ns(), v)),
            Err(e) => {
                tracing::debug!(pod_sandbox_id = %rec.id, error = %e, "network counters");
                None
            }
        });
        let pressure = match layout {
            crate::cgroup::Layout::V2(_) if !rec.cgroup_parent.is_empty() => layout
                .dir("", &rec.cgroups_path)
                .and_then(|d| d.parent().and_then(crate::cgroup::v2_pressure)),
            _ => None,
        };
        SandboxUsage {
            pressure,
            record: rec,
            cgroup: total,
            nano_cores,
            network,
            containers,
        }
    }

    /// ListPodSandboxStats: every ready pod `keep` accepts. The pods'
    /// network counters are read on one thread, the containers grouped
    /// by pod once.
    pub fn sandbox_usages(
        &self,
        keep: impl Fn(&SandboxRecord) -> bool,
        reading: Reading,
    ) -> Vec<SandboxUsage> {
        self.forget_gone_samples();
        let mut recs: Vec<SandboxRecord> = self
            .sandboxes
            .list_ids()
            .iter()
            .filter_map(|i| self.sandboxes.get(i))
            .filter(|r| r.state == SandboxState::Ready && keep(r))
            .collect();
        recs.sort_by_key(|r| r.created_at);
        let mut by_pod: HashMap<String, Vec<ContainerRecord>> =
            recs.iter().map(|r| (r.id.clone(), Vec::new())).collect();
        for c in self.lock().0.values() {
            if let Some(v) = by_pod.get_mut(&c.sandbox_id) {
                v.push(c.clone());
            }
        }
        let pinned: Vec<PathBuf> = recs.iter().filter_map(pinned_netns).collect();
        let mut counters = netdev::read_each(pinned).into_iter();
        recs.into_iter()
            .map(|rec| {
                let network = pinned_netns(&rec).map(|_| {
                    counters
                        .next()
                        .unwrap_or_else(|| Err(std::io::Error::other("no counters read")))
                });
                let containers = by_pod.remove(&rec.id).unwrap_or_default();
                self.pod_usage(rec, containers, network, reading)
            })
            .collect()
    }
}

/// The pinned network namespace of a ready pod that has one of its own.
fn pinned_netns(rec: &SandboxRecord) -> Option<PathBuf> {
    match (&rec.netns, rec.state) {
        (Some(ns), SandboxState::Ready) => Some(ns.clone()),
        _ => None,
    }
}
