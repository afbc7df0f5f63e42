//! Containers: turning a CRI ContainerConfig, the image's config and the
//! pod's sandbox into an OCI runtime spec.

pub mod manager;
mod ops;
pub mod seccomp;
pub mod spec;
pub mod stream;
pub mod user;

/// Why a container config was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);
