//! The CRI wire's error vocabulary, in one place: each domain room's error
//! (`image`, `sandbox` and the containers it carries, `cgroup`, `network`)
//! becomes a [`tonic::Status`] here, code and message, and nowhere else.
//! The domain rooms say what went wrong; only this file says what the
//! kubelet hears. It relies on the codes: NotFound for idempotent removes,
//! Unavailable while husk recovers, DeadlineExceeded for timeouts.

use crate::cgroup::resources::ResourceError;
use crate::image::ImageError;
use crate::network::cni::CniError;
use crate::sandbox::SandboxError;
use crate::sys::is_out_of_space;
use tonic::{Code, Status};

/// What a handler may answer besides a domain room's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("husk is still recovering its state; retry shortly")]
    Recovering,
}

impl Error {
    /// The gRPC code of this error.
    pub fn code(&self) -> Code {
        match self {
            Error::Image(e) => image_code(e),
            Error::Sandbox(e) => sandbox_code(e),
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::Recovering => Code::Unavailable,
        }
    }
}

/// The code of an image store error.
pub fn image_code(e: &ImageError) -> Code {
    match e {
        ImageError::InvalidReference { .. }
        | ImageError::Invalid(_)
        | ImageError::InvalidCredentials(_)
        | ImageError::DigestMismatch { .. }
        | ImageError::SizeMismatch { .. }
        | ImageError::UnsafeEntry { .. } => Code::InvalidArgument,
        ImageError::NotFound(_) => Code::NotFound,
        ImageError::Unauthenticated(_) => Code::Unauthenticated,
        ImageError::PermissionDenied(_) => Code::PermissionDenied,
        ImageError::Registry { status, .. } if *status == 429 || *status >= 500 => {
            Code::Unavailable
        }
        ImageError::Registry { .. } => Code::FailedPrecondition,
        ImageError::Transport { .. } => Code::Unavailable,
        ImageError::Config(_) => Code::FailedPrecondition,
        ImageError::Timeout(_) => Code::DeadlineExceeded,
        ImageError::Io { source, .. } if is_out_of_space(source) => Code::ResourceExhausted,
        ImageError::Io { .. } | ImageError::Internal(_) => Code::Internal,
    }
}

/// The code of a pod's or a container's error.
pub fn sandbox_code(e: &SandboxError) -> Code {
    match e {
        SandboxError::Invalid(_) => Code::InvalidArgument,
        SandboxError::Unsupported(_) => Code::Unimplemented,
        SandboxError::NotFound(_) => Code::NotFound,
        SandboxError::NameReserved { .. } => Code::AlreadyExists,
        SandboxError::Timeout(_) => Code::DeadlineExceeded,
        SandboxError::NotRunning(_)
        | SandboxError::Refused(_)
        | SandboxError::Idmap(_)
        | SandboxError::Unreachable(_) => Code::FailedPrecondition,
        SandboxError::Image(e) => image_code(e),
        SandboxError::Resources(e) => resource_code(e),
        // No network config yet: the node is not ready for pods.
        SandboxError::Cni(CniError::NoConfig(_)) => Code::FailedPrecondition,
        SandboxError::Cni(CniError::Timeout { .. }) => Code::DeadlineExceeded,
        // The network's bridge has no port left for one more pod.
        SandboxError::Cni(CniError::BridgeFull { .. }) => Code::ResourceExhausted,
        SandboxError::Io { source, .. } if is_out_of_space(source) => Code::ResourceExhausted,
        SandboxError::Cni(_) | SandboxError::Io { .. } | SandboxError::Shim(_) => Code::Internal,
    }
}

/// The code of a refused or failed cgroup change.
pub fn resource_code(e: &ResourceError) -> Code {
    match e {
        ResourceError::Invalid(_) => Code::InvalidArgument,
        ResourceError::NoCgroup { .. } | ResourceError::BelowUsage { .. } => {
            Code::FailedPrecondition
        }
        // The kernel refused the value itself.
        ResourceError::Write { source, .. } if source.raw_os_error() == Some(libc::EINVAL) => {
            Code::InvalidArgument
        }
        // A memory limit below what the container holds and cannot reclaim.
        ResourceError::Write { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
            Code::FailedPrecondition
        }
        ResourceError::Write { .. } => Code::Internal,
        // systemd refused the properties, or is not reachable.
        ResourceError::Systemd(_) => Code::Internal,
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        Status::new(err.code(), err.to_string())
    }
}

impl From<SandboxError> for Status {
    fn from(err: SandboxError) -> Self {
        Error::from(err).into()
    }
}

impl From<ImageError> for Status {
    fn from(err: ImageError) -> Self {
        Error::from(err).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_kinds() {
        let s: Status = Error::NotFound("image \"x\"".into()).into();
        assert_eq!(s.code(), Code::NotFound);
        assert!(s.message().contains("image \"x\""));
        let s: Status = Error::Recovering.into();
        assert_eq!(s.code(), Code::Unavailable);
        let s: Status = ImageError::InvalidReference {
            reference: "UPPER".into(),
            reason: "repository name must be lowercase".into(),
        }
        .into();
        assert_eq!(s.code(), Code::InvalidArgument);
    }

    #[test]
    fn resource_errors_keep_their_codes() {
        let invalid = ResourceError::Invalid("cpu_shares 1 is below 2".into());
        assert_eq!(resource_code(&invalid), Code::InvalidArgument);
        let s: Status = SandboxError::Resources(invalid).into();
        assert_eq!(s.code(), Code::InvalidArgument);
        let missing = ResourceError::NoCgroup {
            path: "/pod/none".into(),
        };
        assert_eq!(resource_code(&missing), Code::FailedPrecondition);
    }

    #[test]
    fn a_full_bridge_is_an_exhausted_resource() {
        let full = CniError::BridgeFull {
            plugin: "bridge".into(),
            command: "ADD".into(),
            msg: "failed to connect \"veth1\" to bridge cni0: exchange full".into(),
        };
        let s: Status = SandboxError::Cni(full).into();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(
            s.message().contains("bridge holds 1023 ports"),
            "{}",
            s.message()
        );
    }
}
