//! What can go wrong in the image store, said with the reference, digest
//! or path it concerns; the server turns each into a gRPC status.

/// Errors of the image store.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("{0}")]
    Invalid(String),
    #[error("image not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    InvalidCredentials(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("registry {url} answered {status}: {message}")]
    Registry {
        url: String,
        status: u16,
        message: String,
    },
    #[error("cannot reach registry at {url}: {message}")]
    Transport { url: String, message: String },
    #[error("content digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch { expected: String, actual: String },
    #[error("blob {digest} size mismatch: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        digest: String,
        expected: u64,
        actual: u64,
    },
    #[error("layer entry {entry:?} refused: {reason}")]
    UnsafeEntry { entry: String, reason: String },
    #[error("registry configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
}

impl ImageError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ImageError {
        ImageError::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<crate::reference::ParseError> for ImageError {
    fn from(e: crate::reference::ParseError) -> Self {
        ImageError::InvalidReference {
            reference: e.reference,
            reason: e.reason,
        }
    }
}

impl From<super::manifest::DocumentError> for ImageError {
    fn from(e: super::manifest::DocumentError) -> Self {
        ImageError::Invalid(e.to_string())
    }
}
