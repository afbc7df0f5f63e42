//! `/exec`, `/attach` and `/portForward`: the kubelet asks the runtime
//! for a streaming URL (CRI Exec, Attach, PortForward) and proxies the
//! client's upgrade request to it, as the kubelet's streaming proxy does:
//! the request head is forwarded with the URL's path, then bytes are
//! copied both ways, so SPDY/3.1 and WebSocket (the `channel.k8s.io`
//! protocols) pass through unchanged, the runtime's `101 Switching
//! Protocols` (or refusal) included.

use super::{container_id, forward_head, refuse, Request};
use crate::api::cri::{AttachRequest, ExecRequest, PortForwardRequest};
use crate::kubelet::lifecycle::Ctx;
use crate::streaming::http::Head;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// `http://host:port/path` → (host:port, /path). Only plain HTTP: the
/// runtime's streaming server listens on loopback.
pub fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    Some((host.to_string(), format!("/{path}")))
}

async fn url(ctx: &Ctx, req: &Request) -> Result<String, (u16, String)> {
    let verb = req.segments.first().map(|s| s.as_str()).unwrap_or("");
    let mut rt = ctx.cri.rt.clone();
    let call = |r: Result<String, tonic::Status>, what: &str| {
        r.map_err(|e| (500, format!("{what}: {}", e.message())))
    };
    let timeout = Duration::from_secs(30);
    match verb {
        "exec" => {
            let (_, id) = container_id(ctx, &req.segments, false)?;
            let cmd = req.all("command");
            if cmd.is_empty() {
                return Err((400, "you must specify at least 1 command".into()));
            }
            let mut r = tonic::Request::new(ExecRequest {
                container_id: id,
                cmd,
                tty: req.flag("tty"),
                stdin: req.flag("input"),
                stdout: req.flag("output"),
                stderr: req.flag("error") && !req.flag("tty"),
            });
            r.set_timeout(timeout);
            call(rt.exec(r).await.map(|x| x.into_inner().url), "Exec")
        }
        "attach" => {
            let (_, id) = container_id(ctx, &req.segments, false)?;
            let mut r = tonic::Request::new(AttachRequest {
                container_id: id,
                tty: req.flag("tty"),
                stdin: req.flag("input"),
                stdout: req.flag("output"),
                stderr: req.flag("error") && !req.flag("tty"),
            });
            r.set_timeout(timeout);
            call(rt.attach(r).await.map(|x| x.into_inner().url), "Attach")
        }
        _ => {
            let (ns, pod) = match req.segments.as_slice() {
                [_, ns, pod] | [_, ns, pod, _] => (ns, pod),
                _ => return Err((400, "expected /portForward/NAMESPACE/POD".into())),
            };
            let p = ctx
                .status
                .find(ns, pod)
                .ok_or_else(|| (404, format!("pod {ns}/{pod} not found on this node")))?;
            let rtp = ctx
                .cri
                .pod(
                    &ctx.settings.node_name,
                    crate::kubelet::kit::defaults::uid(&p),
                )
                .await
                .map_err(|e| (500, e.to_string()))?;
            let sandbox = rtp
                .ready_sandbox()
                .ok_or_else(|| (400, format!("pod {ns}/{pod} has no running sandbox")))?;
            let mut r = tonic::Request::new(PortForwardRequest {
                pod_sandbox_id: sandbox.id.clone(),
                port: Vec::new(),
            });
            r.set_timeout(timeout);
            call(
                rt.port_forward(r).await.map(|x| x.into_inner().url),
                "PortForward",
            )
        }
    }
}

pub async fn proxy<S>(mut s: S, ctx: &Ctx, head: &Head, req: &Request) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let url = match url(ctx, req).await {
        Ok(u) => u,
        Err((code, msg)) => return refuse(&mut s, code, &msg).await,
    };
    let Some((host, path)) = split_url(&url) else {
        return refuse(&mut s, 500, &format!("unsupported streaming URL {url:?}")).await;
    };
    let mut up = match tokio::net::TcpStream::connect(&host).await {
        Ok(c) => c,
        Err(e) => return refuse(&mut s, 500, &format!("streaming server {host}: {e}")).await,
    };
    up.write_all(&forward_head(head, &path, &host)).await?;
    tokio::io::copy_bidirectional(&mut s, &mut up).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_urls_split() {
        assert_eq!(
            split_url("http://127.0.0.1:3456/exec/abc"),
            Some(("127.0.0.1:3456".into(), "/exec/abc".into()))
        );
        assert_eq!(split_url("https://x/y"), None);
    }
}
