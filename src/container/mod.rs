//! Containers: turning a CRI ContainerConfig, the image's config and the
//! pod's sandbox into an OCI runtime spec; running them through the pod's
//! shim; their cgroups (usage, live resource updates) and exits.

pub mod apparmor;
pub mod cgroups;
mod exits;
pub mod manager;
pub mod mounts;
mod ops;
mod recover;
pub mod resources;
pub mod seccomp;
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
