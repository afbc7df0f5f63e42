//! Security profiles for the pause and for containers alike: seccomp
//! (`RuntimeDefault`, `Localhost`, `Unconfined`) and AppArmor. Each turns
//! a CRI request into the OCI spec's form, or refuses it with a
//! [`ProfileError`] that callers answer as InvalidArgument.

pub mod apparmor;
pub mod ids;
pub mod seccomp;

/// Why a profile request was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProfileError(pub String);
