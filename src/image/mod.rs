//! The image store: pulls from registries, a content store of verified
//! blobs, per-layer overlay snapshots, and the image records the CRI
//! ImageService lists.
//!
//! Flow of a pull (see `pull.rs`): resolve the reference against the
//! registry's endpoints → pick the node's platform from an index → fetch
//! manifest and config → download missing layers in parallel (one download
//! per blob however many pulls want it) → unpack each layer, in order, onto
//! a view of its parents as soon as it and its parent are ready → verify the
//! diff ID → commit the snapshot → write the image record. Only that last
//! write makes the image visible.

pub mod auth;
pub mod confined;
pub mod content;
pub mod follow;
pub mod hosts;
pub mod import;
pub mod manager;
pub mod manifest;
pub mod pull;
pub mod records;
pub mod registry;
pub mod snapshot;
pub mod unpack;

pub use manager::{ImageManager, ImageStoreConfig};
pub use records::ImageRecord;

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

impl From<manifest::DocumentError> for ImageError {
    fn from(e: manifest::DocumentError) -> Self {
        ImageError::Invalid(e.to_string())
    }
}
