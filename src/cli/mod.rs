//! Client-side commands: they talk to a running runtime over its socket.

pub mod check;
pub mod config_import;
mod config_runtimes;
pub mod images;
pub mod kubelet;
pub mod node_flags;
pub mod run;
pub mod serve_flags;
pub mod stream;

use tonic::transport::{Channel, Endpoint};

/// The default runtime endpoint.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/husk/husk.sock";

/// Connects to `unix:///path` (or a bare path).
pub async fn connect(endpoint: &str) -> anyhow::Result<Channel> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        anyhow::bail!("endpoint {endpoint:?} must be unix:///absolute/path");
    }
    let path = path.to_string();
    Endpoint::try_from("http://[::]:50051")?
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .map_err(|e| {
            // tonic's error repeats its source in its own text; name the
            // innermost cause once.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(next) = cause.source() {
                cause = next;
            }
            anyhow::anyhow!("connect to {endpoint}: {cause}")
        })
}
