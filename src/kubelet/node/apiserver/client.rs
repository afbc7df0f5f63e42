//! A client for a cluster whose client certificate is rotated: the
//! kubeconfig's server, CA, auth and headers as kube-rs reads them, over
//! connections that present the certificate the certificate manager's
//! [`Identity`] holds.
//!
//! The API server authenticates a connection once, at its handshake, and
//! a resumed TLS session as the certificate it first saw: so each
//! certificate gets connections of its own. When the identity changes,
//! the next request builds a new connection pool with a new TLS config
//! (no session to resume); the old pool's idle connections close with it
//! and requests under way (watches) finish on theirs, as the kubelet
//! closes its connections when its certificate rotates.

use crate::kubelet::managers::certificates::client_pem;
use crate::kubelet::managers::certificates::store::{Identity, Pair};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_rustls::rustls;
use tower::ServiceBuilder;

type Connector = hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>;
type Pool = hyper_util::client::legacy::Client<Connector, kube::client::Body>;

/// What a connection pool is built from.
struct Recipe {
    roots: rustls::RootCertStore,
    identity: Arc<Identity>,
    connect: Option<Duration>,
    read: Option<Duration>,
    write: Option<Duration>,
}

impl Recipe {
    fn pool(&self) -> Result<Pool, rustls::Error> {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(self.roots.clone())
        .with_client_cert_resolver(self.identity.clone());
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(self.connect);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let mut conn = hyper_timeout::TimeoutConnector::new(https);
        conn.set_read_timeout(self.read);
        conn.set_write_timeout(self.write);
        Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(conn))
    }
}

/// The pool of the identity's current generation, made anew when it
/// changes.
#[derive(Clone)]
struct Fresh {
    recipe: Arc<Recipe>,
    current: Arc<Mutex<(u64, Pool)>>,
}

impl tower::Service<http::Request<kube::client::Body>> for Fresh {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let generation = self.recipe.identity.generation();
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.0 != generation {
            match self.recipe.pool() {
                Ok(p) => {
                    tracing::info!(
                        generation,
                        "new client certificate: new connections to the API server"
                    );
                    *cur = (generation, p);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot build connections for the new certificate")
                }
            }
        }
        cur.1.request(req)
    }
}

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
    let recipe = Arc::new(Recipe {
        roots,
        identity: identity.clone(),
        connect: cfg.connect_timeout,
        read: cfg.read_timeout,
        write: cfg.write_timeout,
    });
    let first = recipe.pool()?;
    let fresh = Fresh {
        current: Arc::new(Mutex::new((identity.generation(), first))),
        recipe,
    };
    let service = ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .layer(cfg.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(fresh);
    Ok((
        kube::Client::new(service, cfg.default_namespace.clone()),
        identity,
    ))
}
