//! A client for a cluster whose client certificate is rotated: the
//! kubeconfig's server, CA, auth and headers as kube-rs reads them, over a
//! TLS connector that presents whatever certificate the certificate
//! manager's [`Identity`] holds when a connection is made.

use crate::kubelet::managers::certificates::client_pem;
use crate::kubelet::managers::certificates::store::{Identity, Pair};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;
use tower::ServiceBuilder;

/// A client presenting the kubeconfig's client certificate through an
/// [`Identity`] that can be swapped; fails for a kubeconfig without one.
pub fn rotating(
    cfg: kube::Config,
    kubeconfig: &Path,
) -> anyhow::Result<(kube::Client, Arc<Identity>)> {
    let what = || format!("kubeconfig {}", kubeconfig.display());
    let pem = client_pem(kubeconfig)
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| anyhow::anyhow!("{}: no client certificate to rotate", what()))?;
    let identity = Arc::new(
        Pair::parse(&pem)
            .and_then(Identity::new)
            .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?,
    );
    let mut roots = rustls::RootCertStore::empty();
    for der in cfg.root_cert.iter().flatten() {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.clone()))
            .map_err(|e| anyhow::anyhow!("{}: CA: {e}", what()))?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_client_cert_resolver(identity.clone());
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(cfg.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let mut conn = hyper_timeout::TimeoutConnector::new(https);
    conn.set_read_timeout(cfg.read_timeout);
    conn.set_write_timeout(cfg.write_timeout);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(conn);
    let service = ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .layer(cfg.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok((
        kube::Client::new(service, cfg.default_namespace.clone()),
        identity,
    ))
}
