//! The address husk gives shim v2 runtimes as containerd's (`-address`,
//! `<state>/shim-v2.sock`), and what it serves there: the part of
//! containerd's API that shims call back into. runwasi's shims look a
//! container's image up (Containers, Images), read its WebAssembly layers
//! from the content store (Content Read, Info) and store the modules they
//! precompiled (Leases, Content Write and Update); the runc shim only
//! hashes the path into its socket's name.
//!
//! - `containers.rs`, `images.rs`: the lookups, from husk's records;
//! - `content.rs`: husk's content store, with labels kept for the server's
//!   life; `write.rs`: a Write stream; `leases.rs`: leases taken and let go.

mod containers;
mod content;
mod images;
mod leases;
mod write;

use super::instrument::State;
use crate::api::containerd_services::{
    containers::containers_server::ContainersServer, content::content_server::ContentServer,
    images::images_server::ImagesServer, leases::leases_server::LeasesServer,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_stream::wrappers::UnixListenerStream;

/// Labels of blobs, by digest (what a shim set on them).
pub type Labels = Arc<Mutex<HashMap<String, HashMap<String, String>>>>;

/// Serves `<state>/shim-v2.sock` for the server's life.
pub fn spawn(state_dir: &Path, state: Arc<State>) -> anyhow::Result<()> {
    let path = state_dir.join("shim-v2.sock");
    let listener = super::bind(&path)?;
    let labels = Labels::default();
    tokio::spawn(async move {
        let r = tonic::transport::Server::builder()
            .add_service(ContainersServer::new(containers::Containers(state.clone())))
            .add_service(ImagesServer::new(images::Images(state.clone())))
            .add_service(ContentServer::new(content::Content { state, labels }))
            .add_service(LeasesServer::new(leases::Leases))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "the shims' containerd address stopped serving");
        }
    });
    Ok(())
}

/// Now, as a protobuf timestamp.
fn now() -> prost_types::Timestamp {
    let ns = crate::sys::now_ns();
    prost_types::Timestamp {
        seconds: ns / 1_000_000_000,
        nanos: (ns % 1_000_000_000) as i32,
    }
}
