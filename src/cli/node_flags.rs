//! The flags of the kubelet's node managers, as the kubelet spells them:
//! node allocatable (`--kube-reserved`, `--system-reserved`,
//! `--enforce-node-allocatable` and the reserved cgroups), the pods'
//! process limit (`--pod-max-pids`), eviction
//! (`--eviction-hard`, `--eviction-soft` with grace periods, the pressure
//! transition period, the longest grace period of a soft eviction) and
//! image GC (`--image-gc-high-threshold`, `--image-gc-low-threshold`,
//! `--minimum-image-ttl-duration`). Each value is checked when parsed; the
//! cross-checks (a soft threshold without a grace period, a low image GC
//! threshold above the high one) in [`NodeFlags::apply`].

use crate::kubelet::kit::node_config::parse_duration;
use crate::kubelet::kit::node_config::{self, Reservation};
use crate::kubelet::kit::settings::Settings;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct NodeFlags {
    /// Resources reserved for the kubelet and the runtime
    /// (cpu=100m,memory=256Mi,pid=1000,ephemeral-storage=1Gi).
    #[arg(long, default_value = "", value_parser = node_config::parse_reservation)]
    pub kube_reserved: Reservation,
    /// Resources reserved for the rest of the system.
    #[arg(long, default_value = "", value_parser = node_config::parse_reservation)]
    pub system_reserved: Reservation,
    /// pods, kube-reserved, system-reserved (comma-separated) or none.
    #[arg(long, default_value = "pods")]
    pub enforce_node_allocatable: String,
    /// The cgroup bounded by --kube-reserved when enforced.
    #[arg(long)]
    pub kube_reserved_cgroup: Option<String>,
    /// The cgroup bounded by --system-reserved when enforced.
    #[arg(long)]
    pub system_reserved_cgroup: Option<String>,
    /// The most processes a pod may have (its cgroup's pids.max); -1: no
    /// limit of the pod's own.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub pod_max_pids: i64,
    /// Hard eviction thresholds (memory.available<100Mi,nodefs.available<10%,…).
    #[arg(long, default_value = node_config::DEFAULT_EVICTION_HARD)]
    pub eviction_hard: String,
    /// Soft eviction thresholds; each needs a grace period.
    #[arg(long, default_value = "")]
    pub eviction_soft: String,
    /// Grace periods of the soft thresholds (memory.available=1m30s,…).
    #[arg(long, default_value = "")]
    pub eviction_soft_grace_period: String,
    /// How long a pressure condition stays after its threshold clears.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub eviction_pressure_transition_period: Duration,
    /// The longest grace period (s) of a pod evicted by a soft threshold.
    #[arg(long, default_value_t = 0)]
    pub eviction_max_pod_grace_period: i64,
    /// How often eviction signals are observed (the kubelet's is 10s).
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "10s")]
    pub eviction_monitoring_period: Duration,
    /// Disk usage (percent) of the image file system that starts image GC.
    #[arg(long, default_value_t = 85)]
    pub image_gc_high_threshold: u8,
    /// Disk usage (percent) image GC frees down to.
    #[arg(long, default_value_t = 80)]
    pub image_gc_low_threshold: u8,
    /// Images unused for less than this are never collected.
    #[arg(long, value_parser = parse_duration, default_value = "2m")]
    pub minimum_image_ttl_duration: Duration,
    /// The runtime's sandbox image, which image GC never removes (runtimes
    /// that pin it, as husk serve does, need not be told).
    #[arg(long)]
    pub pod_infra_container_image: Option<String>,
    /// How often image GC runs (the kubelet's is 5m).
    #[arg(long, hide = true, value_parser = parse_duration, default_value = "5m")]
    pub image_gc_period: Duration,
}

impl NodeFlags {
    pub fn apply(&self, s: &mut Settings) -> Result<(), String> {
        s.kube_reserved = self.kube_reserved;
        s.system_reserved = self.system_reserved;
        s.enforce_node_allocatable = node_config::parse_enforce(&self.enforce_node_allocatable)
            .map_err(|e| format!("--enforce-node-allocatable: {e}"))?;
        s.kube_reserved_cgroup = self.kube_reserved_cgroup.clone();
        s.pod_max_pids = (self.pod_max_pids > 0).then_some(self.pod_max_pids);
        s.system_reserved_cgroup = self.system_reserved_cgroup.clone();
        for (key, cgroup) in [
            ("kube-reserved", &s.kube_reserved_cgroup),
            ("system-reserved", &s.system_reserved_cgroup),
        ] {
            if s.enforce_node_allocatable.iter().any(|e| e == key) && cgroup.is_none() {
                return Err(format!(
                    "--enforce-node-allocatable={key} needs --{key}-cgroup"
                ));
            }
        }
        s.eviction.hard = node_config::parse_thresholds(&self.eviction_hard)
            .map_err(|e| format!("--eviction-hard: {e}"))?;
        s.eviction.soft =
            node_config::soft_thresholds(&self.eviction_soft, &self.eviction_soft_grace_period)
                .map_err(|e| format!("--eviction-soft: {e}"))?;
        s.eviction.transition = self.eviction_pressure_transition_period;
        s.eviction.max_pod_grace = self.eviction_max_pod_grace_period.max(0);
        s.eviction.period = self
            .eviction_monitoring_period
            .max(Duration::from_millis(100));
        s.image_gc.high = self.image_gc_high_threshold;
        s.image_gc.low = self.image_gc_low_threshold;
        s.image_gc.min_age = self.minimum_image_ttl_duration;
        s.image_gc.period = self.image_gc_period.max(Duration::from_millis(100));
        s.image_gc.sandbox_image = self.pod_infra_container_image.clone();
        s.image_gc.check()
    }
}
