//! The streaming server: the HTTP(S) endpoint the Exec, Attach and
//! PortForward RPCs point clients at (`/exec/<token>`, `/attach/<token>`,
//! `/portforward/<token>`), as the kubelet's CRI streaming library serves
//! them for containerd and CRI-O.
//!
//! Invariants: a token is used once and expires (`tokens.rs`); an unknown,
//! used or expired token gets 404 before any upgrade; the listener is bound
//! when `husk serve` starts (127.0.0.1 on a random port by default), so
//! the URLs the RPCs return are valid from the first request. What happens
//! inside a session lives in `remotecommand.rs` and `portforward.rs`; the
//! processes and sockets come from a `Backend` (the container and sandbox
//! managers in `husk serve`).

pub mod channels;
pub mod client;
pub mod fdio;
pub mod http;
pub mod portforward;
pub mod remotecommand;
pub mod spdy;
pub mod tokens;
pub mod ws;

use futures::future::BoxFuture;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokens::{Pending, StdioOpts, Tokens};
use tokio::io::{AsyncRead, AsyncWrite};

/// A process's end of a session, as the backend hands it over.
#[derive(Default)]
pub struct ProcessIo {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// A terminal's master: input, resize, and (exec) output.
    pub pty: Option<OwnedFd>,
    /// Exec: the exit code once the process is gone; dropping it earlier
    /// kills the process.
    pub exit: Option<BoxFuture<'static, io::Result<i32>>>,
    /// Attach: held while the client's stdin is open.
    pub control: Option<Box<dyn Send>>,
    /// A terminal that is not a master here (a shim v2 runtime's): how a
    /// resize reaches it.
    pub resizer: Option<Resizer>,
    /// Exec: told when the client's stdin ended (a shim v2 runtime holds
    /// the process's stdin open until then).
    pub stdin_closer: Option<BoxFuture<'static, ()>>,
    /// Attach: the session ends when the client's stdin does (containerd's
    /// rule: unless the container is stdin_once and the attach has no
    /// tty, in which case only the container's stdin closes and output
    /// goes on until the container ends).
    pub end_with_stdin: bool,
}

/// Resizes a terminal to (columns, rows).
pub type Resizer = std::sync::Arc<dyn Fn(u16, u16) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where sessions get their processes and network namespaces.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    async fn exec(
        &self,
        container: &str,
        cmd: &[String],
        opts: StdioOpts,
    ) -> Result<ProcessIo, String>;
    async fn attach(&self, container: &str, opts: StdioOpts) -> Result<ProcessIo, String>;
    /// The pinned network namespace of a sandbox.
    fn netns(&self, sandbox: &str) -> Result<PathBuf, String>;
}

/// The streaming server's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub address: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub token_ttl: Duration,
}

pub struct Server {
    tokens: Tokens,
    base: String,
    addr: SocketAddr,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

fn tls_acceptor(cert: &PathBuf, key: &PathBuf) -> io::Result<tokio_rustls::TlsAcceptor> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, p: &PathBuf, e: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("streaming {what} {}: {e}", p.display()),
        )
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad("certificate", cert, e.to_string()))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", key, e.to_string()))?;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io::Error::other(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("streaming TLS: {e}")))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

impl Server {
    /// Binds the listener and starts serving in the background.
    pub async fn start(s: &Settings, backend: Arc<dyn Backend>) -> io::Result<Arc<Server>> {
        let tls = match (&s.tls_cert, &s.tls_key) {
            (Some(c), Some(k)) => Some(tls_acceptor(c, k)?),
            (None, None) => None,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "streaming TLS needs both a certificate and a key",
                ))
            }
        };
        let listener = tokio::net::TcpListener::bind(&s.address)
            .await
            .map_err(|e| {
                io::Error::new(e.kind(), format!("streaming listen on {}: {e}", s.address))
            })?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = Arc::new(Server {
            tokens: Tokens::new(s.token_ttl),
            base: format!("{scheme}://{addr}"),
            addr,
        });
        let srv = server.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "streaming accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let (srv, backend, tls) = (srv.clone(), backend.clone(), tls.clone());
                tokio::spawn(async move {
                    let io: Box<dyn Io> = match tls {
                        Some(t) => match t.accept(tcp).await {
                            Ok(s) => Box::new(s),
                            Err(e) => {
                                tracing::debug!(%peer, error = %e, "streaming TLS handshake");
                                return;
                            }
                        },
                        None => Box::new(tcp),
                    };
                    if let Err(e) = srv.handle(io, backend).await {
                        tracing::debug!(%peer, error = %e, "streaming connection");
                    }
                });
            }
        });
        tracing::info!(address = %addr, scheme, "streaming server listening");
        Ok(server)
    }

    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    /// A URL for `p`, or None when too many requests are outstanding.
    pub fn url_for(&self, p: Pending) -> Option<String> {
        let kind = match &p {
            Pending::Exec { .. } => "exec",
            Pending::Attach { .. } => "attach",
            Pending::PortForward { .. } => "portforward",
        };
        let token = self.tokens.insert(p)?;
        Some(format!("{}/{kind}/{token}", self.base))
    }

    async fn handle(&self, mut io: Box<dyn Io>, backend: Arc<dyn Backend>) -> io::Result<()> {
        let head = http::read_request(&mut io).await?;
        let path = head.path.split('?').next().unwrap_or("");
        let mut parts = path.trim_start_matches('/').splitn(2, '/');
        let (kind, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let pending = match kind {
            "exec" | "attach" | "portforward" if head.method == "GET" || head.method == "POST" => {
                self.tokens.consume(token)
            }
            _ => None,
        };
        let matches = matches!(
            (&pending, kind),
            (Some(Pending::Exec { .. }), "exec")
                | (Some(Pending::Attach { .. }), "attach")
                | (Some(Pending::PortForward { .. }), "portforward")
        );
        let Some(pending) = pending.filter(|_| matches) else {
            return http::respond(&mut io, 404, "Not Found", &[], "404 page not found").await;
        };
        let rest = head.rest.clone();
        let websocket = head.upgrades_to("websocket");
        match pending {
            Pending::PortForward { sandbox, ports } => {
                let netns = match backend.netns(&sandbox) {
                    Ok(n) => n,
                    Err(e) => {
                        return http::respond(&mut io, 500, "Internal Server Error", &[], &e).await
                    }
                };
                if websocket {
                    let mut allowed: Vec<(&str, bool)> =
                        vec![(portforward::TUNNEL_PROTOCOL, false)];
                    allowed.extend_from_slice(portforward::WS_PROTOCOLS);
                    let Some((proto, b64)) = ws_accept(&mut io, &head, &allowed).await? else {
                        return Ok(());
                    };
                    let io = http::Prefixed::new(rest, io);
                    if proto == portforward::TUNNEL_PROTOCOL {
                        let inner = ws::tunnel(io, true);
                        portforward::serve_spdy(inner, sandbox, netns).await
                    } else {
                        portforward::serve_ws(io, b64, ports, sandbox, netns).await
                    }
                } else {
                    let Some(_proto) =
                        spdy_accept(&mut io, &head, &[portforward::SPDY_PROTOCOL]).await?
                    else {
                        return Ok(());
                    };
                    portforward::serve_spdy(http::Prefixed::new(rest, io), sandbox, netns).await
                }
            }
            Pending::Exec {
                container,
                cmd,
                opts,
            } => {
                let streams = match self.open_streams(io, &head, rest, websocket, opts).await? {
                    Some(s) => s,
                    None => return Ok(()),
                };
                let what = format!("{cmd:?}");
                match backend.exec(&container, &cmd, opts).await {
                    Ok(pio) => remotecommand::run(streams, pio, opts.tty, what).await,
                    Err(e) => {
                        let pio = ProcessIo {
                            exit: Some(Box::pin(async move { Err(io::Error::other(e)) })),
                            ..Default::default()
                        };
                        remotecommand::run(streams, pio, false, what).await
                    }
                }
                Ok(())
            }
            Pending::Attach { container, opts } => {
                let streams = match self.open_streams(io, &head, rest, websocket, opts).await? {
                    Some(s) => s,
                    None => return Ok(()),
                };
                match backend.attach(&container, opts).await {
                    Ok(pio) => remotecommand::run(streams, pio, opts.tty, container).await,
                    Err(e) => {
                        let pio = ProcessIo {
                            exit: Some(Box::pin(async move {
                                Err(io::Error::other(format!(
                                    "error attaching to container: {e}"
                                )))
                            })),
                            ..Default::default()
                        };
                        remotecommand::run(streams, pio, false, container).await
                    }
                }
                Ok(())
            }
        }
    }

    async fn open_streams(
        &self,
        mut io: Box<dyn Io>,
        head: &http::Head,
        rest: Vec<u8>,
        websocket: bool,
        opts: StdioOpts,
    ) -> io::Result<Option<channels::Streams>> {
        if websocket {
            let Some((proto, _)) = ws_accept(&mut io, head, remotecommand::WS_PROTOCOLS).await?
            else {
                return Ok(None);
            };
            Ok(Some(
                remotecommand::ws_streams(http::Prefixed::new(rest, io), &proto, opts).await?,
            ))
        } else {
            let Some(proto) = spdy_accept(&mut io, head, remotecommand::SPDY_PROTOCOLS).await?
            else {
                return Ok(None);
            };
            Ok(Some(
                remotecommand::spdy_streams(http::Prefixed::new(rest, io), &proto, opts).await?,
            ))
        }
    }
}

/// The SPDY upgrade: protocol negotiation, then `101`. None when refused
/// (the refusal has been written).
async fn spdy_accept(
    io: &mut Box<dyn Io>,
    head: &http::Head,
    protocols: &[&str],
) -> io::Result<Option<String>> {
    let offered = head.header_list("x-stream-protocol-version");
    if offered.is_empty() {
        http::respond(
            io,
            400,
            "Bad Request",
            &[],
            "unable to upgrade: X-Stream-Protocol-Version is required",
        )
        .await?;
        return Ok(None);
    }
    let Some(proto) = remotecommand::negotiate_spdy(head, protocols) else {
        let accepted: Vec<(&str, String)> = protocols
            .iter()
            .map(|p| ("X-Accepted-Stream-Protocol-Versions", p.to_string()))
            .collect();
        let msg = format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {protocols:?}"
        );
        http::respond(io, 403, "Forbidden", &accepted, &msg).await?;
        return Ok(None);
    };
    if !head.upgrades_to("SPDY/3.1") {
        http::respond(
            io,
            400,
            "Bad Request",
            &[],
            "unable to upgrade: missing upgrade headers in request",
        )
        .await?;
        return Ok(None);
    }
    http::switching(
        io,
        &[
            ("Connection", "Upgrade".into()),
            ("Upgrade", "SPDY/3.1".into()),
            ("X-Stream-Protocol-Version", proto.clone()),
        ],
    )
    .await?;
    Ok(Some(proto))
}

/// The WebSocket handshake with subprotocol negotiation: the client's
/// first offered protocol that is allowed (none offered means "").
async fn ws_accept(
    io: &mut Box<dyn Io>,
    head: &http::Head,
    allowed: &[(&str, bool)],
) -> io::Result<Option<(String, bool)>> {
    if head.method != "GET" {
        http::respond(
            io,
            405,
            "Method Not Allowed",
            &[],
            "websocket upgrades use GET",
        )
        .await?;
        return Ok(None);
    }
    let Some(key) = head.header("sec-websocket-key") else {
        http::respond(io, 400, "Bad Request", &[], "missing Sec-WebSocket-Key").await?;
        return Ok(None);
    };
    if head.header("sec-websocket-version") != Some("13") {
        http::respond(
            io,
            400,
            "Bad Request",
            &[("Sec-WebSocket-Version", "13".into())],
            "unsupported websocket version",
        )
        .await?;
        return Ok(None);
    }
    let mut offered = head.header_list("sec-websocket-protocol");
    if offered.is_empty() {
        offered.push(String::new());
    }
    let chosen = offered.iter().find_map(|o| {
        allowed
            .iter()
            .find(|(a, _)| a == o)
            .map(|(a, b)| (a.to_string(), *b))
    });
    let Some((proto, b64)) = chosen else {
        let names: Vec<&str> = allowed.iter().map(|(a, _)| *a).collect();
        let msg =
            format!("requested protocol(s) are not supported: {offered:?}; supports {names:?}");
        http::respond(io, 403, "Forbidden", &[], &msg).await?;
        return Ok(None);
    };
    let mut hs = vec![
        ("Upgrade", "websocket".to_string()),
        ("Connection", "Upgrade".to_string()),
        ("Sec-WebSocket-Accept", ws::accept_key(key)),
    ];
    if !proto.is_empty() {
        hs.push(("Sec-WebSocket-Protocol", proto.clone()));
    }
    http::switching(io, &hs).await?;
    Ok(Some((proto, b64)))
}
