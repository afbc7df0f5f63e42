//! Containers: turning a CRI ContainerConfig, the image's config and the
//! pod's sandbox into an OCI runtime spec; running them through the pod's
//! shim; their stats, live resource updates and exits (cgroups and
//! security profiles are shared with the pause: `crate::cgroup`,
//! `crate::security`).

mod context;
mod cpu_samples;
mod create;
pub mod events;
mod exit_watch;
mod exits;
mod gate;
mod host_devices;
mod idmapped;
pub mod image_volumes;
pub mod kernel_mounts;
mod layer_usage;
mod lifecycle;
pub mod manager;
pub mod mounts;
mod nri_view;
mod ops;
mod pod_mounts;
pub mod record;
mod recover;
pub mod signal;
pub mod spec;
pub mod stats;
pub mod stream;
mod transitions;
mod update;
pub mod user;

/// Why a container config was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl From<crate::security::ProfileError> for SpecError {
    fn from(e: crate::security::ProfileError) -> Self {
        SpecError(e.0)
    }
}

impl From<crate::security::ids::IdError> for SpecError {
    fn from(e: crate::security::ids::IdError) -> Self {
        SpecError(e.0)
    }
}
