//! The address husk gives shim v2 runtimes as containerd's (`-address`,
//! `<state>/shim-v2.sock`): a gRPC server of no service, so a shim that
//! dials containerd eagerly (runwasi's, to look its image up) finds one,
//! and each of its calls answers Unimplemented (runwasi then reads the
//! module from the container's rootfs). The runc shim only hashes the
//! path into its socket's name.

use std::path::Path;
use tokio_stream::wrappers::UnixListenerStream;

/// Serves `<state>/shim-v2.sock` for the server's life.
pub fn spawn(state: &Path) -> anyhow::Result<()> {
    let path = state.join("shim-v2.sock");
    let listener = super::bind(&path)?;
    tokio::spawn(async move {
        let r = tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "the shims' containerd address stopped serving");
        }
    });
    Ok(())
}
