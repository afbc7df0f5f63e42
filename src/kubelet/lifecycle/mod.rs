//! The pod lifecycle: pod workers (`pod_workers`, one task per pod), the
//! sync of one pod (`sync`, as kuberuntime's SyncPod), starting a
//! container (`start`), terminating and removing a pod (`terminate`), and
//! collecting what is left of pods and containers (`gc`). `Ctx` is what
//! every worker shares: the managers, the runtime client and the settings.
//! The sync loop that feeds the workers is the kubelet's root (`run`).

pub mod gc;
pub mod pod_workers;
pub mod start;
pub mod sync;
pub mod terminate;

use crate::kubelet::kit::backoff::Backoff;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::recorder::Recorder;
use crate::kubelet::kit::runtime::Cri;
use crate::kubelet::kit::settings::Settings;
use crate::kubelet::managers::cgroups::PodCgroups;
use crate::kubelet::managers::eviction::EvictionManager;
use crate::kubelet::managers::image_gc::ImageGc;
use crate::kubelet::managers::images::ImageManager;
use crate::kubelet::managers::pleg;
use crate::kubelet::managers::prober::ProbeManager;
use crate::kubelet::managers::reasons::ReasonCache;
use crate::kubelet::managers::status;
use crate::kubelet::managers::status_manager::StatusManager;
use crate::kubelet::spec::api_volumes;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;

/// What every worker shares.
pub struct Ctx {
    pub settings: Settings,
    pub cri: Cri,
    pub images: ImageManager,
    pub crash_backoff: Backoff,
    /// Retries of API-backed volume set-ups (500 ms doubling to the error
    /// requeue), as the kubelet's volume manager retries a failed mount.
    pub mount_backoff: Backoff,
    pub reasons: ReasonCache,
    pub probes: ProbeManager,
    pub status: StatusManager,
    pub pleg: Arc<pleg::Health>,
    /// The pod and QoS cgroups.
    pub cgroups: PodCgroups,
    pub image_gc: Arc<ImageGc>,
    pub eviction: Arc<EvictionManager>,
    pub recorder: Recorder,
    /// Secrets, config maps and tokens (from the API server, if any).
    pub objects: api_volumes::Objects,
}

impl Ctx {
    pub fn set_pod_reason(&self, pod: &Pod, reason: &str, message: &str) {
        tracing::warn!(pod = %defaults::full_name(pod), reason, message, "pod sync failed");
        self.reasons.set(defaults::uid(pod), "", reason, message);
    }
    pub fn clear_pod_reason(&self, pod: &Pod) {
        self.reasons.clear(defaults::uid(pod), "");
    }
    /// What the status of a pod is generated from.
    pub fn status_inputs(&self) -> status::Inputs<'_> {
        status::Inputs {
            runtime: &self.cri.name,
            settings: &self.settings,
            probes: &self.probes,
            reasons: &self.reasons,
        }
    }
}
