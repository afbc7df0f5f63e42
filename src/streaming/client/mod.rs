//! husk's streaming client: follows the URL an Exec, Attach or
//! PortForward RPC returned (husk's or any CRI runtime's, e.g.
//! containerd's) over SPDY/3.1 or WebSocket, the way client-go does.
//!
//! Exec/attach: streams error, stdin, stdout, stderr (not with a tty) and
//! resize (tty), the exit code decoded from the Status on the error
//! stream. Port-forward: over SPDY (or SPDY tunnelled in WebSocket
//! binary messages, `SPDY/3.1+portforward.k8s.io`), an error and a data
//! stream per forwarded connection with `port` and `requestID` headers;
//! or the WebSocket channel form, one connection per requested port.

mod portforward;

use super::channels::{self, CLOSE, ERROR, RESIZE, STDERR, STDIN, STDOUT};
use super::spdy::{self, Headers};
use super::{http, ws};
use bytes::Bytes;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transport {
    Spdy,
    WebSocket,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "spdy" => Ok(Transport::Spdy),
            "websocket" | "ws" => Ok(Transport::WebSocket),
            o => Err(format!("transport {o:?}: use spdy or websocket")),
        }
    }
}

/// How to reach an https streaming server.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// PEM CA certificates to trust.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that ask for one
    /// (the kubelet API).
    pub client: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("streaming URL {0:?}: {1}")]
    Url(String, String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("upgrade refused: HTTP {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("{0}")]
    Remote(String),
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

struct Target {
    https: bool,
    host: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Target, ClientError> {
    let bad = |m: &str| ClientError::Url(url.to_string(), m.to_string());
    let (https, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(bad("must start with http:// or https://"));
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let host = if host
        .rsplit(':')
        .next()
        .is_some_and(|p| p.parse::<u16>().is_ok())
        && host.contains(':')
        && !host.ends_with(']')
    {
        host.to_string()
    } else if https {
        format!("{host}:443")
    } else {
        format!("{host}:80")
    };
    Ok(Target {
        https,
        host,
        path: path.to_string(),
    })
}

async fn dial(t: &Target, tls: &Tls) -> Result<Box<dyn Io>, ClientError> {
    let tcp = tokio::net::TcpStream::connect(&t.host).await?;
    let _ = tcp.set_nodelay(true);
    if !t.https {
        return Ok(Box::new(tcp));
    }
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    let ca = tls.ca.as_ref().ok_or_else(|| {
        ClientError::Url(t.host.clone(), "https needs a CA file (--tls-ca)".into())
    })?;
    for c in CertificateDer::pem_file_iter(ca).map_err(|e| io::Error::other(e.to_string()))? {
        roots
            .add(c.map_err(|e| io::Error::other(e.to_string()))?)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io::Error::other(e.to_string()))?
    .with_root_certificates(roots);
    let cfg = match &tls.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| io::Error::other(format!("{}: {e}", cert.display())))?;
            let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                .map_err(|e| io::Error::other(format!("{}: {e}", key.display())))?;
            cfg.with_client_auth_cert(chain, key)
                .map_err(|e| io::Error::other(e.to_string()))?
        }
        None => cfg.with_no_client_auth(),
    };
    let name = t.host.rsplit_once(':').map(|(h, _)| h).unwrap_or(&t.host);
    let name = ServerName::try_from(name.trim_matches(['[', ']']).to_string())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await?;
    Ok(Box::new(s))
}

async fn refused(mut io: Box<dyn Io>, head: http::Head) -> ClientError {
    let mut body = head.rest.clone();
    let _ = tokio::time::timeout(Duration::from_secs(2), io.read_to_end(&mut body)).await;
    ClientError::Refused {
        status: head.status,
        body: String::from_utf8_lossy(&body).trim().to_string(),
    }
}

/// Upgrades to SPDY/3.1 offering `protocols`; returns the session and
/// the protocol the server chose.
async fn spdy_connect(
    url: &str,
    tls: &Tls,
    protocols: &[&str],
) -> Result<(spdy::Session, String), ClientError> {
    let t = parse_url(url)?;
    let mut io = dial(&t, tls).await?;
    let mut req = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n",
        t.path, t.host
    );
    for p in protocols {
        req.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
    }
    req.push_str("\r\n");
    io.write_all(req.as_bytes()).await?;
    let head = http::read_response(&mut io).await?;
    if head.status != 101 || !head.upgrades_to("SPDY/3.1") {
        return Err(refused(io, head).await);
    }
    let proto = head
        .header("x-stream-protocol-version")
        .unwrap_or("")
        .to_string();
    let (session, mut incoming) =
        spdy::Session::start(http::Prefixed::new(head.rest.clone(), io), false)?;
    // Servers do not open streams towards the client here.
    tokio::spawn(async move {
        while let Some(i) = incoming.recv().await {
            i.writer.reset().await;
        }
    });
    Ok((session, proto))
}

/// The WebSocket handshake offering `protocols`; returns the upgraded
/// connection and the chosen protocol.
async fn ws_connect(
    url: &str,
    tls: &Tls,
    protocols: &[&str],
) -> Result<(http::Prefixed<Box<dyn Io>>, String), ClientError> {
    let t = parse_url(url)?;
    let mut io = dial(&t, tls).await?;
    let key = ws::new_key();
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: {}\r\n\r\n",
        t.path,
        t.host,
        protocols.join(", ")
    );
    io.write_all(req.as_bytes()).await?;
    let head = http::read_response(&mut io).await?;
    if head.status != 101 {
        return Err(refused(io, head).await);
    }
    if head.header("sec-websocket-accept") != Some(ws::accept_key(&key).as_str()) {
        return Err(ClientError::Remote("bad Sec-WebSocket-Accept".into()));
    }
    let proto = head
        .header("sec-websocket-protocol")
        .unwrap_or("")
        .to_string();
    Ok((http::Prefixed::new(head.rest.clone(), io), proto))
}

/// The client's side of an exec or attach session.
#[derive(Default)]
pub struct Stdio {
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub tty: bool,
    /// Terminal sizes (columns, rows) to send.
    pub resize: Option<mpsc::Receiver<(u16, u16)>>,
}

/// The exit code a Status on the error stream stands for.
pub fn decode_status(raw: &[u8], json: bool) -> Result<i32, ClientError> {
    if raw.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(0);
    }
    if !json {
        return Err(ClientError::Remote(
            String::from_utf8_lossy(raw).into_owned(),
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(raw)
        .map_err(|e| ClientError::Remote(format!("error stream protocol error: {e}")))?;
    match v["status"].as_str() {
        Some("Success") => Ok(0),
        Some("Failure") if v["reason"] == "NonZeroExitCode" => v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str())
            .and_then(|m| m.parse::<i32>().ok())
            .ok_or_else(|| {
                ClientError::Remote("error stream protocol error: no ExitCode cause".into())
            }),
        _ => Err(ClientError::Remote(
            v["message"].as_str().unwrap_or("unknown error").to_string(),
        )),
    }
}

fn size_json(cols: u16, rows: u16) -> Vec<u8> {
    format!("{{\"Width\":{cols},\"Height\":{rows}}}").into_bytes()
}

async fn copy_to(mut rx: mpsc::Receiver<Bytes>, mut w: Box<dyn AsyncWrite + Send + Unpin>) {
    while let Some(d) = rx.recv().await {
        if w.write_all(&d).await.is_err() {
            break;
        }
        let _ = w.flush().await;
    }
}

/// Runs an exec or attach session at `url`; returns the exit code.
pub async fn remotecommand(
    url: &str,
    transport: Transport,
    tls: &Tls,
    io: Stdio,
) -> Result<i32, ClientError> {
    match transport {
        Transport::Spdy => remotecommand_spdy(url, tls, io).await,
        Transport::WebSocket => remotecommand_ws(url, tls, io).await,
    }
}

async fn remotecommand_spdy(url: &str, tls: &Tls, mut io: Stdio) -> Result<i32, ClientError> {
    let (session, proto) = spdy_connect(
        url,
        tls,
        &[
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
            "v2.channel.k8s.io",
            "channel.k8s.io",
        ],
    )
    .await?;
    let wait = Duration::from_secs(30);
    let open = |kind: &'static str| {
        let s = &session;
        async move { s.open(Headers::new().with("streamType", kind), wait).await }
    };
    let (mut err_r, _err_w) = open("error").await?;
    let stdin = match io.stdin.is_some() {
        true => Some(open("stdin").await?),
        false => None,
    };
    let stdout = match io.stdout.is_some() {
        true => Some(open("stdout").await?),
        false => None,
    };
    let stderr = match io.stderr.is_some() && !io.tty {
        true => Some(open("stderr").await?),
        false => None,
    };
    let resize = match io.tty && proto != "v2.channel.k8s.io" && proto != "channel.k8s.io" {
        true => Some(open("resize").await?),
        false => None,
    };
    if let (Some((_, w)), Some(mut src)) = (stdin, io.stdin.take()) {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match src.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if w.send(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            w.close().await;
        });
    }
    if let (Some((_, w)), Some(mut rx)) = (resize, io.resize.take()) {
        tokio::spawn(async move {
            while let Some((c, r)) = rx.recv().await {
                if w.send(&size_json(c, r)).await.is_err() {
                    break;
                }
            }
        });
    }
    let mut outs = Vec::new();
    if let (Some((r, _)), Some(w)) = (stdout, io.stdout.take()) {
        outs.push(tokio::spawn(copy_to(r.into_channel(), w)));
    }
    if let (Some((r, _)), Some(w)) = (stderr, io.stderr.take()) {
        outs.push(tokio::spawn(copy_to(r.into_channel(), w)));
    }
    for o in outs {
        let _ = o.await;
    }
    let mut status = Vec::new();
    while let Some(d) = err_r.recv().await {
        status.extend_from_slice(&d);
    }
    session.close().await;
    decode_status(
        &status,
        proto == "v4.channel.k8s.io" || proto == "v5.channel.k8s.io",
    )
}

async fn remotecommand_ws(url: &str, tls: &Tls, mut io: Stdio) -> Result<i32, ClientError> {
    let (conn, proto) = ws_connect(
        url,
        tls,
        &["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"],
    )
    .await?;
    let v5 = proto == "v5.channel.k8s.io";
    let (mut reader, writer) = ws::split(conn, false);
    if let Some(mut src) = io.stdin.take() {
        let w = writer.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match src.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if channels::ws_send(&w, STDIN, false, &buf[..n])
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
            if v5 {
                let _ = w.binary(vec![CLOSE, STDIN]).await;
            }
        });
    }
    if let Some(mut rx) = io.resize.take() {
        let w = writer.clone();
        tokio::spawn(async move {
            while let Some((c, r)) = rx.recv().await {
                if channels::ws_send(&w, RESIZE, false, &size_json(c, r))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
    }
    let (mut out, mut err) = (io.stdout.take(), io.stderr.take());
    let mut status = Vec::new();
    while let Some(m) = reader.next().await? {
        let Some((ch, data)) = channels::ws_decode(m, false) else {
            continue;
        };
        let sink = match ch {
            STDOUT => out.as_mut(),
            STDERR => err.as_mut().or(out.as_mut()),
            ERROR => {
                status.extend_from_slice(&data);
                continue;
            }
            _ => None,
        };
        if let Some(w) = sink {
            w.write_all(&data).await?;
            w.flush().await?;
        }
    }
    writer.close().await;
    decode_status(&status, proto.starts_with("v4.") || v5)
}

pub use portforward::{forward_ws_channels, PortForwarder};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_statuses() {
        let t = parse_url("http://127.0.0.1:1234/exec/abc").expect("url");
        assert_eq!(
            (t.https, t.host.as_str(), t.path.as_str()),
            (false, "127.0.0.1:1234", "/exec/abc")
        );
        assert_eq!(parse_url("https://h/x").expect("url").host, "h:443");
        assert!(parse_url("ftp://x").is_err());
        assert_eq!(
            decode_status(br#"{"metadata":{},"status":"Success"}"#, true).expect("ok"),
            0
        );
        let nz = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"42"}]}}"#;
        assert_eq!(decode_status(nz, true).expect("code"), 42);
        assert!(decode_status(br#"{"status":"Failure","message":"boom"}"#, true).is_err());
        assert_eq!(decode_status(b"", false).expect("empty"), 0);
    }
}
