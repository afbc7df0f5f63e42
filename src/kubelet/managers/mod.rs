//! The managers around the pod workers, as the kubelet draws them:
//! probes (`prober`, with the lifecycle hooks of `handlers`), the PLEG
//! (`pleg`), status (`status` computes it, `status_manager` keeps and
//! publishes it, `reasons` holds the waiting reasons), images (`images`)
//! and the kubelet's cgroups (`cgroups`). Each serves the lifecycle room
//! and depends only on the kit, the spec and the pod config.

pub mod certificates;
pub mod cgroups;
pub mod eviction;
pub mod handlers;
pub mod image_gc;
pub mod images;
pub mod oom;
pub mod pleg;
pub mod prober;
pub mod reasons;
pub mod status;
pub mod status_manager;
