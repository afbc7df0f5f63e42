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
mod error;
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

pub use error::ImageError;
pub use manager::{ImageManager, ImageStoreConfig};
pub use records::ImageRecord;
