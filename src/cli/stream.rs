//! `husk exec`, `husk attach` and `husk port-forward`: ask any CRI runtime
//! for a streaming URL, then follow it with husk's streaming client.
//! With `-t` the local terminal is put in raw mode and its size (and
//! every SIGWINCH) is sent as a resize.

use crate::api::cri::runtime_service_client::RuntimeServiceClient;
use crate::api::cri::{AttachRequest, ExecRequest, PortForwardRequest};
use crate::streaming::client::{self, Stdio, Tls, Transport};
use anyhow::Context as _;
use std::os::fd::AsFd;

/// Options shared by exec and attach.
pub struct Opts {
    pub stdin: bool,
    pub tty: bool,
    pub transport: Transport,
    pub tls: Tls,
}

struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    fn enter(on: bool) -> RawMode {
        let fd = std::io::stdin();
        if !on || !rustix::termios::isatty(fd.as_fd()) {
            return RawMode(None);
        }
        let Ok(old) = rustix::termios::tcgetattr(fd.as_fd()) else {
            return RawMode(None);
        };
        let mut raw = old.clone();
        raw.make_raw();
        let _ = rustix::termios::tcsetattr(fd.as_fd(), rustix::termios::OptionalActions::Now, &raw);
        RawMode(Some(old))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin().as_fd(),
                rustix::termios::OptionalActions::Now,
                old,
            );
        }
    }
}

fn stdio(o: &Opts) -> Stdio {
    let resize = o.tty.then(|| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let size = || rustix::termios::tcgetwinsize(std::io::stdout().as_fd()).ok();
            let Ok(mut winch) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            else {
                return;
            };
            loop {
                if let Some(ws) = size() {
                    if tx.send((ws.ws_col, ws.ws_row)).await.is_err() {
                        return;
                    }
                }
                if winch.recv().await.is_none() {
                    return;
                }
            }
        });
        rx
    });
    Stdio {
        stdin: o
            .stdin
            .then(|| Box::new(tokio::io::stdin()) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        stdout: Some(Box::new(tokio::io::stdout())),
        stderr: (!o.tty).then(|| Box::new(tokio::io::stderr()) as Box<_>),
        tty: o.tty,
        resize,
    }
}

/// Runs `cmd` in `container`; returns its exit code.
pub async fn exec(
    endpoint: &str,
    container: &str,
    cmd: Vec<String>,
    o: Opts,
) -> anyhow::Result<i32> {
    let mut rt = RuntimeServiceClient::new(crate::api::connect(endpoint).await?);
    let url = rt
        .exec(ExecRequest {
            container_id: container.into(),
            cmd,
            tty: o.tty,
            stdin: o.stdin,
            stdout: true,
            stderr: !o.tty,
        })
        .await
        .context("Exec")?
        .into_inner()
        .url;
    let _raw = RawMode::enter(o.tty);
    Ok(client::remotecommand(&url, o.transport, &o.tls, stdio(&o)).await?)
}

/// Attaches to `container` until it exits or stdin ends.
pub async fn attach(endpoint: &str, container: &str, o: Opts) -> anyhow::Result<i32> {
    let mut rt = RuntimeServiceClient::new(crate::api::connect(endpoint).await?);
    let url = rt
        .attach(AttachRequest {
            container_id: container.into(),
            stdin: o.stdin,
            tty: o.tty,
            stdout: true,
            stderr: !o.tty,
        })
        .await
        .context("Attach")?
        .into_inner()
        .url;
    let _raw = RawMode::enter(o.tty);
    Ok(client::remotecommand(&url, o.transport, &o.tls, stdio(&o)).await?)
}

/// Listens on 127.0.0.1:`local` and forwards each connection to `remote`
/// in the pod, until interrupted.
pub async fn port_forward(
    endpoint: &str,
    pod: &str,
    local: u16,
    remote: u16,
    transport: Transport,
    tls: Tls,
) -> anyhow::Result<()> {
    let mut rt = RuntimeServiceClient::new(crate::api::connect(endpoint).await?);
    let url = rt
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod.into(),
            port: vec![remote as i32],
        })
        .await
        .context("PortForward")?
        .into_inner()
        .url;
    let pf = std::sync::Arc::new(client::PortForwarder::connect(&url, transport, &tls).await?);
    let l = tokio::net::TcpListener::bind(("127.0.0.1", local))
        .await
        .with_context(|| format!("listen on 127.0.0.1:{local}"))?;
    eprintln!("Forwarding from {} -> {remote}", l.local_addr()?);
    loop {
        tokio::select! {
            c = l.accept() => {
                let (conn, _) = c?;
                let pf = pf.clone();
                tokio::spawn(async move {
                    if let Err(e) = pf.forward(remote, conn).await {
                        eprintln!("{e}");
                    }
                });
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
