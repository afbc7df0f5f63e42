//! The crate's error type and its single mapping onto gRPC status codes.
//!
//! Every module has its own error enum (carrying ids and paths); they all
//! convert into [`Error`], and [`Error`] converts into [`tonic::Status`] in
//! exactly one place, [`From<Error> for tonic::Status`]. kubelet relies on the
//! codes: NotFound for idempotent removes, Unavailable while husk recovers,
//! DeadlineExceeded for timeouts.

use crate::image::ImageError;

/// The gRPC category an error falls in; each module error says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    InvalidArgument,
    AlreadyExists,
    FailedPrecondition,
    Unavailable,
    DeadlineExceeded,
    Unauthenticated,
    PermissionDenied,
    /// Out of space (a full disk or quota), or a message over the limit.
    ResourceExhausted,
    /// A feature husk does not have yet (the message names it).
    Unimplemented,
    Internal,
}

/// Whether an I/O error means the disk (or the quota) is full.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

/// The crate-wide error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("husk is still recovering its state; retry shortly")]
    Recovering,
}

impl Error {
    /// The gRPC category of this error.
    pub fn kind(&self) -> Kind {
        match self {
            Error::Image(e) => e.kind(),
            Error::Sandbox(e) => e.kind(),
            Error::InvalidArgument(_) => Kind::InvalidArgument,
            Error::NotFound(_) => Kind::NotFound,
            Error::Recovering => Kind::Unavailable,
        }
    }
}

impl From<Kind> for tonic::Code {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::NotFound => tonic::Code::NotFound,
            Kind::InvalidArgument => tonic::Code::InvalidArgument,
            Kind::AlreadyExists => tonic::Code::AlreadyExists,
            Kind::FailedPrecondition => tonic::Code::FailedPrecondition,
            Kind::Unavailable => tonic::Code::Unavailable,
            Kind::DeadlineExceeded => tonic::Code::DeadlineExceeded,
            Kind::Unauthenticated => tonic::Code::Unauthenticated,
            Kind::PermissionDenied => tonic::Code::PermissionDenied,
            Kind::ResourceExhausted => tonic::Code::ResourceExhausted,
            Kind::Unimplemented => tonic::Code::Unimplemented,
            Kind::Internal => tonic::Code::Internal,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        tonic::Status::new(err.kind().into(), err.to_string())
    }
}

impl From<crate::sandbox::SandboxError> for tonic::Status {
    fn from(err: crate::sandbox::SandboxError) -> Self {
        Error::from(err).into()
    }
}

impl From<ImageError> for tonic::Status {
    fn from(err: ImageError) -> Self {
        Error::from(err).into()
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_kinds() {
        let s: tonic::Status = Error::NotFound("image \"x\"".into()).into();
        assert_eq!(s.code(), tonic::Code::NotFound);
        assert!(s.message().contains("image \"x\""));
        let s: tonic::Status = Error::Recovering.into();
        assert_eq!(s.code(), tonic::Code::Unavailable);
        let s: tonic::Status = ImageError::InvalidReference {
            reference: "UPPER".into(),
            reason: "repository name must be lowercase".into(),
        }
        .into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
    }
}
