//! The scrape endpoint: `GET /metrics` on `[metrics] address` (an
//! `ip:port`, or `unix:///path` for a socket), answered in Prometheus'
//! text exposition format (version 0.0.4), one request per connection.
//! The address is bound when the server starts: one that cannot be is an
//! error naming the key, not a failure at the first scrape.

mod collect;

use super::instrument::State;
use collect::{Objects, Process};
use prometheus_client::registry::Registry;
use std::sync::{Arc, Weak};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A bound endpoint, not yet serving.
pub enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

/// Binds `address` (`metrics.address`).
pub async fn bind(address: &str) -> Result<Bound, String> {
    if let Some(path) = address.strip_prefix("unix://") {
        let path = std::path::PathBuf::from(path);
        let _ = std::fs::remove_file(&path);
        return tokio::net::UnixListener::bind(&path)
            .map(|l| Bound::Unix(l, path.clone()))
            .map_err(|e| format!("metrics.address: cannot listen on {address}: {e}"));
    }
    let addr: std::net::SocketAddr = address
        .parse()
        .map_err(|_| format!("metrics.address: {address:?} is not an ip:port or unix:///path"))?;
    tokio::net::TcpListener::bind(addr)
        .await
        .map(Bound::Tcp)
        .map_err(|e| format!("metrics.address: cannot listen on {address}: {e}"))
}

impl Bound {
    /// Where it listens, for the log.
    pub fn address(&self) -> String {
        match self {
            Bound::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Bound::Unix(_, p) => format!("unix://{}", p.display()),
        }
    }
}

/// The registry a scrape encodes.
fn registry(state: Weak<State>) -> Registry {
    let mut root = Registry::default();
    let husk = root.sub_registry_with_prefix("husk");
    crate::metrics::get().register(husk);
    husk.register_collector(Box::new(Objects(state)));
    root.register_collector(Box::new(Process));
    root
}

/// The text of one scrape.
pub fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    out
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, registry: &Registry) {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    let path = loop {
        match s.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => len += n,
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                break (req.method == Some("GET")).then(|| req.path.unwrap_or("").to_string())
            }
            Ok(httparse::Status::Partial) if len < buf.len() => continue,
            _ => break None,
        }
    };
    let (status, ctype, body) = match path.as_deref() {
        Some("/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            scrape(registry),
        ),
        Some(_) => (
            "404 Not Found",
            "text/plain",
            "not found: try /metrics\n".into(),
        ),
        None => ("400 Bad Request", "text/plain", "bad request\n".into()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// The serving task (one at most: a reload that moves the endpoint
/// replaces it).
static SERVING: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>> = std::sync::Mutex::new(None);

/// Stops serving scrapes (a reload that turned the endpoint off).
pub fn stop() {
    if let Some(h) = SERVING.lock().unwrap_or_else(|p| p.into_inner()).take() {
        h.abort();
    }
}

/// Serves scrapes on `bound` from now on, in place of any endpoint
/// served before.
pub fn spawn(bound: Bound, state: &Arc<State>) {
    let registry = Arc::new(registry(Arc::downgrade(state)));
    let task = tokio::spawn(async move {
        loop {
            let r = registry.clone();
            match &bound {
                Bound::Tcp(l) => match l.accept().await {
                    Ok((s, _)) => {
                        tokio::spawn(async move { answer(s, &r).await });
                    }
                    Err(e) => tracing::warn!(error = %e, "metrics accept"),
                },
                Bound::Unix(l, _) => match l.accept().await {
                    Ok((s, _)) => {
                        tokio::spawn(async move { answer(s, &r).await });
                    }
                    Err(e) => tracing::warn!(error = %e, "metrics accept"),
                },
            }
        }
    });
    let old = SERVING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .replace(task);
    if let Some(h) = old {
        h.abort();
    }
}
