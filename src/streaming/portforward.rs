//! Port forwarding into a pod's network namespace (the kubelet's
//! portforward server).
//!
//! SPDY (`portforward.k8s.io`): every forwarded connection is a pair of
//! streams the client opens, `streamType: error` and `streamType: data`,
//! sharing `port` and `requestID` headers; each complete pair becomes one
//! TCP connection to 127.0.0.1 (or ::1) inside the netns, and a failure is
//! written as text on the pair's error stream. The same runs inside the
//! SPDY-over-WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`).
//! WebSocket channels (`v4.channel.k8s.io`): the ports come from the
//! PortForward request; port i has data channel 2i and error channel
//! 2i+1, each first carrying the port as two little-endian bytes.
//!
//! Sockets are created on a short-lived thread that joined the pinned
//! netns (a socket keeps its namespace), then driven by tokio.

use super::channels;
use super::spdy::{self, Incoming};
use super::ws;
use bytes::Bytes;
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
pub const WS_PROTOCOLS: &[(&str, bool)] = &[
    ("v4.channel.k8s.io", false),
    ("v4.base64.channel.k8s.io", true),
    ("", false),
];
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP connection to `port` on the loopback of the netns at `netns`.
pub async fn connect(netns: &Path, port: u16) -> io::Result<tokio::net::TcpStream> {
    let path = netns.to_path_buf();
    let (v4, v6) = tokio::task::spawn_blocking(move || {
        crate::network::netns::in_netns(&path, || {
            use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};
            let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
            let v4: OwnedFd = socket_with(AddressFamily::INET, SocketType::STREAM, flags, None)?;
            let v6: Option<OwnedFd> =
                socket_with(AddressFamily::INET6, SocketType::STREAM, flags, None).ok();
            Ok((v4, v6))
        })
    })
    .await
    .map_err(io::Error::other)??;
    let attempt = |fd: OwnedFd, addr: std::net::SocketAddr| async move {
        let s = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
        tokio::time::timeout(CONNECT_TIMEOUT, s.connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
    };
    let first = attempt(v4, std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
    match (first, v6) {
        (Ok(s), _) => Ok(s),
        (Err(e4), Some(v6)) => attempt(
            v6,
            std::net::SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], port)),
        )
        .await
        .map_err(|_| e4),
        (Err(e4), None) => Err(e4),
    }
}

fn error_text(port: u16, sandbox: &str, e: &io::Error) -> String {
    format!(
        "error forwarding port {port} to pod {sandbox}, uid : failed to connect to localhost:{port} inside the pod's network namespace: {e}"
    )
}

/// Copies both ways: the client's end of input half-closes the TCP
/// connection; the target's EOF ends the forwarded connection.
async fn pump(
    tcp: tokio::net::TcpStream,
    mut from_client: mpsc::Receiver<Bytes>,
    to_client: impl Fn(Vec<u8>) -> futures::future::BoxFuture<'static, io::Result<()>> + Send,
) {
    let (mut rd, mut wr) = tcp.into_split();
    let up = async move {
        while let Some(d) = from_client.recv().await {
            if wr.write_all(&d).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_client(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    // The target closing ends the connection (what the client still sends
    // has a second to drain); the client half-closing only ends `up`.
    let up = tokio::spawn(up);
    let stop = up.abort_handle();
    down.await;
    let _ = tokio::time::timeout(Duration::from_secs(1), up).await;
    stop.abort();
}

struct Pair {
    port: u16,
    data: Option<Incoming>,
    error: Option<Incoming>,
    since: tokio::time::Instant,
}

/// Serves SPDY port-forward streams on `io` until the client leaves.
pub async fn serve_spdy<IO>(io: IO, sandbox: String, netns: PathBuf) -> io::Result<()>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (session, mut incoming) = spdy::Session::start(io, true)?;
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut forwards: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    loop {
        let inc = tokio::select! {
            i = incoming.recv() => match i { Some(i) => i, None => break },
            _ = tick.tick() => {
                // Pairs the client never completed get an error and go.
                let now = tokio::time::Instant::now();
                let stale: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| now.duration_since(p.since) > super::remotecommand::STREAM_CREATION_TIMEOUT)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in stale {
                    if let Some(p) = pairs.remove(&k) {
                        if let Some(e) = p.error {
                            let _ = e.writer.send(b"timed out waiting for streams").await;
                            e.writer.close().await;
                        }
                        if let Some(d) = p.data {
                            d.writer.reset().await;
                        }
                    }
                }
                continue;
            }
        };
        let port = inc
            .headers
            .get("port")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0);
        let kind = inc.headers.get("streamtype").unwrap_or("").to_string();
        let Some(port) = port else {
            tracing::debug!("port-forward stream without a valid port header");
            inc.writer.reset().await;
            continue;
        };
        if kind != "data" && kind != "error" {
            inc.writer.reset().await;
            continue;
        }
        // Old clients send no requestID: pair consecutive stream ids.
        let request = match inc.headers.get("requestid") {
            Some(r) if !r.is_empty() => r.to_string(),
            _ if kind == "error" => inc.id.to_string(),
            _ => inc.id.saturating_sub(2).to_string(),
        };
        let p = pairs.entry(request.clone()).or_insert_with(|| Pair {
            port,
            data: None,
            error: None,
            since: tokio::time::Instant::now(),
        });
        if kind == "data" {
            p.data = Some(inc);
        } else {
            p.error = Some(inc);
        }
        if p.data.is_some() && p.error.is_some() {
            if let Some(Pair {
                port,
                data: Some(data),
                error: Some(error),
                ..
            }) = pairs.remove(&request)
            {
                let (sandbox, netns) = (sandbox.clone(), netns.clone());
                forwards.retain(|t| !t.is_finished());
                forwards.push(tokio::spawn(async move {
                    forward_pair(port, data, error, &sandbox, &netns).await;
                }));
            }
        }
    }
    // The connection is gone: so are its forwarded connections.
    for t in forwards {
        t.abort();
    }
    session.close().await;
    Ok(())
}

async fn forward_pair(port: u16, data: Incoming, error: Incoming, sandbox: &str, netns: &Path) {
    match connect(netns, port).await {
        Err(e) => {
            tracing::debug!(pod_sandbox_id = %sandbox, port, error = %e, "port-forward connect");
            let _ = error
                .writer
                .send(error_text(port, sandbox, &e).as_bytes())
                .await;
        }
        Ok(tcp) => {
            let w = data.writer.clone();
            pump(tcp, data.reader.into_channel(), move |b| {
                let w = w.clone();
                Box::pin(async move { w.send(&b).await })
            })
            .await;
        }
    }
    error.writer.close().await;
    data.writer.close().await;
}

/// Serves the WebSocket channel form for `ports` on an accepted socket.
pub async fn serve_ws<IO>(
    io: IO,
    base64: bool,
    ports: Vec<u16>,
    sandbox: String,
    netns: PathBuf,
) -> io::Result<()>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, writer) = ws::split(io, true);
    let mut inputs = Vec::new();
    let mut outs = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        inputs.push(tx);
        let (data_ch, err_ch) = ((2 * i) as u8, (2 * i + 1) as u8);
        channels::ws_send(&writer, data_ch, base64, &port.to_le_bytes()).await?;
        channels::ws_send(&writer, err_ch, base64, &port.to_le_bytes()).await?;
        outs.push((*port, data_ch, err_ch, rx));
    }
    let demux = tokio::spawn(async move {
        let mut inputs: Vec<Option<mpsc::Sender<Bytes>>> = inputs.into_iter().map(Some).collect();
        while let Ok(Some(m)) = reader.next().await {
            let Some((ch, data)) = channels::ws_decode(m, base64) else {
                continue;
            };
            if ch % 2 == 0 {
                if let Some(Some(tx)) = inputs.get((ch / 2) as usize) {
                    if tx.send(data.into()).await.is_err() {
                        inputs[(ch / 2) as usize] = None;
                    }
                }
            }
        }
    });
    let mut tasks = Vec::new();
    for (port, data_ch, err_ch, rx) in outs {
        let (w, sandbox, netns) = (writer.clone(), sandbox.clone(), netns.clone());
        tasks.push(tokio::spawn(async move {
            match connect(&netns, port).await {
                Err(e) => {
                    let _ = channels::ws_send(
                        &w,
                        err_ch,
                        base64,
                        error_text(port, &sandbox, &e).as_bytes(),
                    )
                    .await;
                }
                Ok(tcp) => {
                    pump(tcp, rx, move |b| {
                        let w = w.clone();
                        Box::pin(async move { channels::ws_send(&w, data_ch, base64, &b).await })
                    })
                    .await;
                }
            }
        }));
    }
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let mut demux = demux;
    tokio::select! {
        _ = futures::future::join_all(tasks) => {}
        // The client left: nothing more to forward.
        _ = &mut demux => {}
    }
    for a in aborts {
        a.abort();
    }
    writer.close().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), demux).await;
    Ok(())
}
