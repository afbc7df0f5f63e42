//! The kubelet API, HTTPS on `--address:--port` (10250), what the API
//! server calls for `kubectl logs`, `exec`, `attach` and `port-forward`:
//!
//! ```text
//! GET  /healthz                                   ok
//! GET  /pods                                      the node's pods (PodList)
//! GET  /containerLogs/NS/POD/CONTAINER            ?follow&tailLines&timestamps&previous&limitBytes&sinceSeconds
//! *    /exec/NS/POD[/UID]/CONTAINER               ?command=…&input&output&error&tty   ┐ proxied to the CRI
//! *    /attach/NS/POD[/UID]/CONTAINER             ?input&output&error&tty             │ streaming URL
//! *    /portForward/NS/POD[/UID]                                                      ┘ (SPDY or WebSocket)
//! ```
//!
//! TLS: the `--tls-cert-file`/`--tls-private-key-file` pair, or a
//! self-signed one made once in `--cert-dir`; with
//! `--rotate-server-certificates`, the certificate the certificate manager
//! has issued (`<cert-dir>/kubelet-server-current.pem`), swapped in as it
//! is renewed, the pair above serving until the first is issued. Clients authenticate with
//! a certificate signed by a `--client-ca-file` CA; a request without one
//! (or with no CA configured) gets 401, but for `/healthz`. Any
//! authenticated client may use every endpoint (no SubjectAccessReview).

pub mod logs;
pub mod stream;

use crate::kubelet::lifecycle::Ctx;
use crate::kubelet::managers::certificates::store::{load_current, Identity, Pair};
use crate::streaming::http::{self, Head};
use std::io;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;

fn bad(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} {}: {e}", path.display()),
    )
}

/// The serving certificate and key (PEM): the given files, or a
/// self-signed pair kept in `--cert-dir` (`<root>/pki` by default).
fn serving_pair(ctx: &Ctx) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let s = &ctx.settings;
    if let (Some(c), Some(k)) = (&s.tls_cert_file, &s.tls_private_key_file) {
        return Ok((std::fs::read(c)?, std::fs::read(k)?));
    }
    let dir = &s.cert_dir;
    let (cert, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if let (Ok(c), Ok(k)) = (std::fs::read(&cert), std::fs::read(&key)) {
        return Ok((c, k));
    }
    let mut names = vec![s.node_name.clone(), "localhost".to_string()];
    names.extend(s.node_ip.clone());
    let ck = rcgen::generate_simple_self_signed(names)
        .map_err(|e| io::Error::other(format!("self-signed certificate: {e}")))?;
    std::fs::create_dir_all(dir)?;
    let (c, k) = (ck.cert.pem(), ck.signing_key.serialize_pem());
    std::fs::write(&cert, &c)?;
    std::fs::write(&key, &k)?;
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    tracing::info!(cert = %cert.display(), "made a self-signed serving certificate for the kubelet API");
    Ok((c.into_bytes(), k.into_bytes()))
}

/// The serving certificate behind a swappable identity, and whether the
/// cluster issued it: with `rotating`, the current issued one when valid;
/// otherwise the given or self-signed pair.
fn serving_identity(ctx: &Ctx, rotating: bool) -> io::Result<(Arc<Identity>, bool)> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let issued = rotating
        .then(|| load_current(&ctx.settings.cert_dir, "server"))
        .flatten()
        .filter(|p| p.valid_now());
    if let Some(p) = issued {
        return Ok((Arc::new(Identity::new(p).map_err(invalid)?), true));
    }
    let (cert, key) = serving_pair(ctx)?;
    let pem = format!(
        "{}\n{}",
        String::from_utf8_lossy(&cert).trim_end(),
        String::from_utf8_lossy(&key)
    );
    let p = Pair::parse(&pem).map_err(|e| invalid(format!("serving pair: {e}")))?;
    Ok((Arc::new(Identity::new(p).map_err(invalid)?), false))
}

/// A serving certificate the certificate manager keeps: the identity,
/// and whether one was already issued.
pub type Serving = Option<(Arc<Identity>, bool)>;

/// The TLS acceptor: serving pair, client certificates optional at the
/// TLS level (checked against the CA when given), required per request.
/// The certificate the manager keeps (`--rotate-server-certificates`) is
/// returned with it.
pub fn acceptor(ctx: &Ctx) -> io::Result<(tokio_rustls::TlsAcceptor, Serving)> {
    let rotating = ctx.settings.rotate_server_certificates;
    let (identity, issued) = serving_identity(ctx, rotating)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?;
    let builder = match &ctx.settings.client_ca_file {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| bad("client CA", ca, e))? {
                roots
                    .add(c.map_err(|e| bad("client CA", ca, e))?)
                    .map_err(|e| bad("client CA", ca, e))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad("client CA", ca, e))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_cert_resolver(identity.clone());
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let serving = rotating.then_some((identity, issued));
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(cfg)), serving))
}

/// Binds the kubelet API (an error if the port is taken) and serves it
/// until the task is aborted.
pub async fn start(ctx: Arc<Ctx>) -> io::Result<(tokio::task::JoinHandle<()>, Serving)> {
    let (tls, serving) = acceptor(&ctx)?;
    let addr = format!("{}:{}", ctx.settings.address, ctx.settings.port);
    let l = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("kubelet API on {addr}: {e}")))?;
    tracing::info!(address = %addr, "kubelet API listening");
    let task = tokio::spawn(async move {
        loop {
            let Ok((c, peer)) = l.accept().await else {
                continue;
            };
            let (tls, ctx) = (tls.clone(), ctx.clone());
            tokio::spawn(async move {
                let Ok(Ok(s)) =
                    tokio::time::timeout(std::time::Duration::from_secs(10), tls.accept(c)).await
                else {
                    return;
                };
                let authed = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty());
                if let Err(e) = serve(s, &ctx, authed).await {
                    tracing::debug!(%peer, error = %e, "kubelet API connection ended");
                }
            });
        }
    });
    Ok((task, serving))
}

/// A request's path split off its query, query decoded.
pub struct Request {
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
}

impl Request {
    pub fn parse(target: &str) -> Request {
        let (path, q) = target.split_once('?').unwrap_or((target, ""));
        Request {
            segments: path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(decode)
                .collect(),
            query: q
                .split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, key: &str) -> Vec<String> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// A boolean parameter: present as 1/true (or empty).
    pub fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| matches!(v, "1" | "true" | "True" | ""))
    }
}

/// Percent-decoding (and `+` as space, as in forms).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn serve<S>(mut s: S, ctx: &Ctx, authed: bool) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let head = http::read_request(&mut s).await?;
    let req = Request::parse(&head.path);
    let first = req.segments.first().map(|s| s.as_str()).unwrap_or("");
    if first == "healthz" {
        return http::respond(&mut s, 200, "OK", &[], "ok").await;
    }
    if !authed {
        return http::respond(&mut s, 401, "Unauthorized", &[], "Unauthorized").await;
    }
    match first {
        "pods" if head.method == "GET" => pods(&mut s, ctx).await,
        "containerLogs" => logs::serve(&mut s, ctx, &req).await,
        "exec" | "attach" | "portForward" => stream::proxy(s, ctx, &head, &req).await,
        _ => http::respond(&mut s, 404, "Not Found", &[], "404 page not found").await,
    }
}

async fn pods<S: AsyncWrite + Unpin>(s: &mut S, ctx: &Ctx) -> io::Result<()> {
    let items: Vec<_> = ctx.status.pods().iter().map(|p| (**p).clone()).collect();
    let body =
        serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
    json(s, 200, &body).await
}

pub async fn json<S: AsyncWrite + Unpin>(
    s: &mut S,
    code: u16,
    v: &serde_json::Value,
) -> io::Result<()> {
    let b = serde_json::to_vec(v).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        if code == 200 { "OK" } else { "Error" },
        b.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&b).await?;
    s.flush().await?;
    let _ = s.shutdown().await;
    Ok(())
}

/// The pod and the CRI container ID for `/<verb>/NS/POD[/UID]/CONTAINER`;
/// `previous` picks the last terminated instance. Err: (code, message).
pub fn container_id(
    ctx: &Ctx,
    segs: &[String],
    previous: bool,
) -> Result<(Arc<k8s_openapi::api::core::v1::Pod>, String), (u16, String)> {
    let (ns, pod, container) = match segs {
        [_, ns, pod, container] => (ns, pod, container),
        [_, ns, pod, _uid, container] => (ns, pod, container),
        _ => return Err((400, "expected /VERB/NAMESPACE/POD/CONTAINER".into())),
    };
    let p = ctx
        .status
        .find(ns, pod)
        .ok_or_else(|| (404, format!("pod {ns}/{pod} not found on this node")))?;
    let st = p.status.clone().unwrap_or_default();
    let cs = st
        .container_statuses
        .iter()
        .flatten()
        .chain(st.init_container_statuses.iter().flatten())
        .find(|c| &c.name == container)
        .ok_or_else(|| {
            (
                404,
                format!("container {container:?} not found in pod {ns}/{pod}"),
            )
        })?;
    let id = if previous {
        cs.last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
            .ok_or_else(|| {
                (
                    400,
                    format!("previous terminated container {container:?} in pod {pod:?} not found"),
                )
            })?
    } else {
        cs.container_id.clone().ok_or_else(|| {
            (
                400,
                format!("container {container:?} in pod {pod:?} is waiting to start"),
            )
        })?
    };
    let id = id
        .split_once("://")
        .map(|(_, i)| i.to_string())
        .unwrap_or(id);
    Ok((p, id))
}

/// A refusal in the API's terms (a plain-text body).
pub async fn refuse<S: AsyncWrite + Unpin>(s: &mut S, code: u16, msg: &str) -> io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    http::respond(s, code, reason, &[], msg).await
}

/// The request head as forwarded upstream: `path` instead of the original,
/// Host set to `host`, the rest as sent.
pub fn forward_head(head: &Head, path: &str, host: &str) -> Vec<u8> {
    let mut s = format!("{} {path} HTTP/1.1\r\nHost: {host}\r\n", head.method);
    for (k, v) in &head.headers {
        if k.eq_ignore_ascii_case("host") || k.eq_ignore_ascii_case("authorization") {
            continue;
        }
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    let mut b = s.into_bytes();
    b.extend_from_slice(&head.rest);
    b
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_like_the_api_server_sends_them() {
        let r = Request::parse(
            "/exec/ns/web/app?command=sh&command=-c&command=echo+hi%21&input=1&tty=true&output",
        );
        assert_eq!(r.segments, ["exec", "ns", "web", "app"]);
        assert_eq!(r.all("command"), ["sh", "-c", "echo hi!"]);
        assert!(r.flag("input") && r.flag("tty") && r.flag("output"));
        assert!(!r.flag("error"));
        assert_eq!(decode("a%2Fb%zz"), "a/b%zz");
        // A % before a multi-byte character (found by fuzzing).
        assert_eq!(decode("b%O\u{1a0}a%5c"), "b%O\u{1a0}a\\");
        let head = Head {
            method: "POST".into(),
            path: "/exec/x".into(),
            headers: vec![
                ("Host".into(), "node:10250".into()),
                ("Upgrade".into(), "SPDY/3.1".into()),
                ("Authorization".into(), "Bearer x".into()),
            ],
            rest: b"early".to_vec(),
            ..Default::default()
        };
        let f = String::from_utf8(forward_head(&head, "/exec/TOKEN", "127.0.0.1:1")).unwrap();
        assert!(f.starts_with("POST /exec/TOKEN HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"));
        assert!(f.contains("Upgrade: SPDY/3.1\r\n"));
        assert!(!f.contains("Bearer"));
        assert!(f.ends_with("\r\n\r\nearly"));
    }
}
