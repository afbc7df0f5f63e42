//! Generated gRPC code: CRI v1 (`runtime.v1`, from the vendored
//! k8s.io/cri-api proto), husk's own admin API (`husk.v1`) and NRI's
//! messages (`nri.pkg.api.v1alpha1`, spoken over ttrpc by `nri/`),
//! containerd's shim v2 messages (`husk.containerd.v2`, by `shim/v2/`),
//! the containerd services served to shim runtimes (`containerd.services.*`,
//! by `server/containerd_api/`); and
//! the channel a client opens to an endpoint's unix socket.

use tonic::transport::{Channel, Endpoint};

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod cri {
    tonic::include_proto!("runtime.v1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod admin {
    tonic::include_proto!("husk.v1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod shim {
    tonic::include_proto!("husk.shim.v1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod nri {
    tonic::include_proto!("nri.pkg.api.v1alpha1");
}

#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod containerd {
    tonic::include_proto!("husk.containerd.v2");
}

/// The containerd services husk serves to shim v2 runtimes (their
/// containerd package names are the gRPC paths).
#[allow(clippy::all, clippy::unwrap_used, missing_docs)]
pub mod containerd_services {
    pub mod containers {
        tonic::include_proto!("containerd.services.containers.v1");
    }
    pub mod images {
        tonic::include_proto!("containerd.services.images.v1");
    }
    pub mod content {
        tonic::include_proto!("containerd.services.content.v1");
    }
    pub mod leases {
        tonic::include_proto!("containerd.services.leases.v1");
    }
}

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
